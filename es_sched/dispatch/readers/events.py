"""The events reader: ``<prefix>.events`` (``read_committed``), from its end at start, no group.

Only the ends the dispatcher acts on are handed over, as ``TaskEnd``s
(``serialization.partial.decode_task_end``): an attempt that ended (completed, failed, timed
out, canceled, completed with errors) frees the task's resources and may stop it on its worker;
a lease the decider ended (``task.lease_expired``: a worker declined the task) may put the task
back in its queue. Every other event is skipped without being decoded further. An event that
does not decode is logged and skipped: the decider, the topic's one writer, dead-letters its own
faults.

Position: in memory, advanced by every ``poll``; nothing is committed, and a restart starts
at the topic's end again.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from confluent_kafka import Message

from es_sched.dispatch.readers.message import value_bytes
from es_sched.errors import SchemaError
from es_sched.kafka.tail import Tail
from es_sched.serialization import decode_task_end
from es_sched.serialization.partial import TaskEnd

log = logging.getLogger("es_sched.dispatcher")


class EventReader:
    """The events topic's tail: ``TaskEnd``s out."""

    def __init__(self, tail: Tail) -> None:
        self.tail = tail

    def poll(self) -> Iterator[TaskEnd]:
        """What arrived since the last read, without waiting."""
        return self._decoded(self.tail.poll())

    def close(self) -> None:
        self.tail.close()

    def _decoded(self, msgs: list[Message]) -> Iterator[TaskEnd]:
        for msg in msgs:
            try:
                found = decode_task_end(value_bytes(msg.value()))
            except SchemaError as exc:
                log.warning("events %s@%s: %s", msg.partition(), msg.offset(), exc)
                continue
            if found is not None:
                yield found
