"""The config reader: ``<prefix>.config``, the whole compacted topic, no group.

Run-time limits, bans, pools and policies (``es_sched.serialization.config``: key =
``<kind>:<subject>``, a tombstone removes the setting). ``catch_up`` reads from the beginning
to the end the topic has at start-up, before anything is placed; then ``poll`` takes what
arrived since, once a tick. Each record is decoded into a ``ConfigChange`` for the dispatcher
to fold into its core (``es_sched.dispatch.config.apply``); one that does not decode goes to the
dead-letter topic. Position: in memory, advanced by every read; nothing is committed, and a
restart reads the topic again from its beginning.
"""

from __future__ import annotations

from collections.abc import Iterator

from confluent_kafka import Message

from es_sched.dispatch.output import Output
from es_sched.dispatch.readers.message import key_text, value_bytes
from es_sched.errors import SchemaError
from es_sched.kafka.tail import Tail
from es_sched.serialization.config import ConfigChange, parse


class ConfigReader:
    """The config topic's tail: ``ConfigChange``s out."""

    def __init__(self, tail: Tail, output: Output) -> None:
        self.tail, self.output = tail, output

    def catch_up(self) -> Iterator[ConfigChange]:
        """Everything up to the topic's end now (``InfrastructureError`` if the broker does not
        answer in time); the records are read here, and decoded as they are taken."""
        return self._decoded(self.tail.catch_up())

    def poll(self) -> Iterator[ConfigChange]:
        """What arrived since the last read, without waiting."""
        return self._decoded(self.tail.poll())

    def close(self) -> None:
        self.tail.close()

    def _decoded(self, msgs: list[Message]) -> Iterator[ConfigChange]:
        for msg in msgs:
            try:
                change = parse(key_text(msg.key()), value_bytes(msg.value()))
            except SchemaError as exc:
                self.output.dead(msg, exc)
                continue
            yield change
