"""The worker-status reader: ``<prefix>.worker-status``, the whole compacted topic, no group.

Every dispatcher reads every worker's reports (a worker serves whichever dispatcher places on
it). ``catch_up`` reads from the beginning to the end the topic has at start-up, before
anything is placed; then ``poll`` takes what arrived since, once a tick.

Decodes (``serialization.wire``) into what the dispatcher applies to its fleet and leases:

- a ``WorkerStatus`` (key = worker id): a ``Report`` with the time the worker sent it, which
  tells a heartbeat from a stale report read at start-up (``liveness.heard_at``);
- a ``Progress`` (key = worker id/task id): the worker is alive, its leases go on;
- a tombstone of a worker's key: ``WorkerLeft``; a tombstone of a progress key means nothing.

A record that does not decode goes to the dead-letter topic; a record of another kind is
skipped. Position: in memory, advanced by every read; nothing is committed, and a restart
reads the topic again from its beginning.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime

from confluent_kafka import Message

from es_sched.dispatch.output import Output
from es_sched.dispatch.readers.message import key_text, value_bytes
from es_sched.errors import SchemaError
from es_sched.kafka.tail import Tail
from es_sched.serialization import wire


@dataclass(frozen=True)
class Report:
    """A worker's status report, and when the worker sent it (None: it does not say)."""

    status: wire.WorkerStatus
    sent_at: datetime | None


@dataclass(frozen=True)
class WorkerLeft:
    """The worker's status was deleted: it left (its leases expire unless it comes back)."""

    worker_id: str


StatusRecord = Report | wire.Progress | WorkerLeft


class StatusReader:
    """The worker-status topic's tail: ``Report``s, ``Progress`` and ``WorkerLeft`` out."""

    def __init__(self, tail: Tail, output: Output) -> None:
        self.tail, self.output = tail, output

    def catch_up(self) -> Iterator[StatusRecord]:
        """Everything up to the topic's end now (``InfrastructureError`` if the broker does not
        answer in time); the records are read here, and decoded as they are taken."""
        return self._decoded(self.tail.catch_up())

    def poll(self) -> Iterator[StatusRecord]:
        """What arrived since the last read, without waiting."""
        return self._decoded(self.tail.poll())

    def close(self) -> None:
        self.tail.close()

    def _decoded(self, msgs: list[Message]) -> Iterator[StatusRecord]:
        for msg in msgs:
            found = self._decode(msg)
            if found is not None:
                yield found

    def _decode(self, msg: Message) -> StatusRecord | None:
        key, value = key_text(msg.key()), value_bytes(msg.value())
        if value is None:
            return None if "/" in key else WorkerLeft(key)
        try:
            record = wire.decode(value)
            sent = wire.sent_time(record) if isinstance(record, wire.WorkerStatus) else None
        except SchemaError as exc:
            self.output.dead(msg, exc)
            return None
        if isinstance(record, wire.WorkerStatus):
            return Report(record, sent)
        return record if isinstance(record, wire.Progress) else None
