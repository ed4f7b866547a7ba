"""The lease journal: ``<prefix>.leases`` (compacted, key = task id), so that leases and tasks
taken back survive a dispatcher restart or a rebalance (ADR 14).

Partition p of the journal holds the tasks read from partition p of ``ready``: whoever owns
ready partition p owns those tasks' leases, so several dispatchers keep one consistent view and
a task's lease moves with its ready partition.

What is written, and when (the dispatcher's tick orders it with ``Output.delivered_all``):

- a grant: a record without a lease whose ``last_epoch`` is the new epoch, delivered with the
  grant's ``DispatchTask`` (ADR 50) and before its assignment is produced, so the next
  process starts after every epoch that may have reached a worker. One whose grant was lost
  while its ``DispatchTask`` landed is granted again under a new token: the input id names
  the token (``dispatch:<task>:<epoch>:<token>``), so the decider takes the second lease
  instead of dropping it as a repeat, and no worker ever saw the first.
- the lease (worker, epoch, token, grant time, GPU), in the delivery that carries the
  assignment, before the ready offsets are committed past the task. Until it lands the
  journal says "waiting at the head of its queue": a process that dies in between leaves the
  task to be dispatched again at the next epoch, never a lease its worker never received.
- a take-back (lease expired, preempted, given back): a record without a lease, with the taken
  epoch; delivered before any later grant of its task (``requeues`` counts them for the tick).
- the task's end (its event, or its worker no longer runs it): a tombstone.

Tasks still waiting on their first dispatch are not journaled: their ready offsets are not
committed, so the ready topic delivers them again.

``load(p)`` reads partition p to its end and returns its live records for
``DispatchCore.resume``; ``forget`` drops the tasks of partitions that are no longer ours
without writing anything (the new owner loads them). A record that does not decode goes to the
dead-letter topic and its task is not resumed.
"""

from __future__ import annotations

import logging
from datetime import datetime

from es_sched.dispatch import records as dispatch_records
from es_sched.dispatch.core.engine import Journaled
from es_sched.dispatch.core.leases import Lease
from es_sched.dispatch.core.queues import ReadyTask
from es_sched.dispatch.output import Output
from es_sched.errors import SchemaError
from es_sched.kafka.clients import read_partition
from es_sched.kafka.connection import KafkaConnection
from es_sched.serialization.records import LeaseRecord, decode_lease, encode_lease

log = logging.getLogger("es_sched.dispatcher")


class LeaseJournal:
    def __init__(self, bootstrap: KafkaConnection, topic: str, output: Output) -> None:
        self.bootstrap, self.topic, self.output = bootstrap, topic, output
        # Every task this dispatcher holds (queued or in flight): its ready partition and task.
        self.tasks: dict[str, tuple[int, ReadyTask]] = {}
        self.written: set[str] = set()  # tasks with a live journal record: their end tombstones
        self.requeues = 0  # take-backs written so far: the tick delivers them before its grants

    def __contains__(self, task_id: str) -> bool:
        return task_id in self.tasks

    def track(self, task: ReadyTask, partition: int) -> None:
        self.tasks[task.task_id] = (partition, task)

    def task(self, task_id: str) -> ReadyTask | None:
        found = self.tasks.get(task_id)
        return None if found is None else found[1]

    # -- writes ----------------------------------------------------------------------------
    def granting(self, task: ReadyTask, epoch: int, now: datetime) -> None:
        """Before the grant's DispatchTask: the epoch is taken, the lease not yet known."""
        self._write(task.task_id, dispatch_records.journal_record(task, epoch), now)

    def leased(self, task: ReadyTask, lease: Lease, gpu: int | None, now: datetime) -> None:
        record = dispatch_records.journal_record(task, lease.epoch, lease, gpu)
        self._write(task.task_id, record, now)

    def queued(self, task_id: str, epoch: int, now: datetime) -> None:
        """Taken back (lease expired, preempted): back at the head of its queue."""
        task = self.task(task_id)
        if task is not None:
            self._write(task_id, dispatch_records.journal_record(task, epoch), now)
            self.requeues += 1

    def ended(self, task_id: str, now: datetime) -> None:
        found = self.tasks.pop(task_id, None)
        if found is not None and task_id in self.written:
            self.written.discard(task_id)
            self.output.produce(self.topic, task_id, None, now, found[0])

    def _write(self, task_id: str, record: LeaseRecord, now: datetime) -> None:
        partition, _ = self.tasks[task_id]
        self.written.add(task_id)
        self.output.produce(self.topic, task_id, encode_lease(record), now, partition)

    # -- partitions ------------------------------------------------------------------------
    def load(self, partition: int) -> list[Journaled]:
        """The live records of one journal partition, read to its end."""
        live: dict[str, Journaled] = {}
        for msg in read_partition(self.bootstrap, self.topic, partition):
            key, value = msg.key(), msg.value()
            task_id = key.decode() if isinstance(key, bytes) else (key or "")
            if value is None:
                live.pop(task_id, None)
                continue
            try:
                raw = value.encode() if isinstance(value, str) else value
                live[task_id] = dispatch_records.journaled(decode_lease(raw), partition)
            except SchemaError as exc:
                live.pop(task_id, None)
                self.output.dead(msg, exc)
        return list(live.values())

    def resumed(self, entry: Journaled, partition: int) -> None:
        self.track(entry.task, partition)
        self.written.add(entry.task.task_id)

    def forget(self, partitions: set[int]) -> set[str]:
        """The tasks of these partitions, forgotten here (their journal records stay)."""
        gone = {task_id for task_id, (p, _) in self.tasks.items() if p in partitions}
        for task_id in gone:
            del self.tasks[task_id]
            self.written.discard(task_id)
        return gone
