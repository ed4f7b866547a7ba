"""A worker process that forges reports, for the lease-binding test (ADR 74).

A real SDK worker of the default pool, with its own id, key and status (it serves
``thief.idle``, a type no test workflow uses, so nothing is placed on it), whose id shares an
assignment partition with the worker named by ``VICTIM``. Once up, a thread reads that
partition from its beginning, as any worker of the pool may, and for the first assignment
addressed to the victim:

1. tries to open its lease token with the thief's own key (logged: ``cannot open``),
2. reports the task completed, through the thief's own producer, twice: as itself
   (``forged-as-thief:<task>``) and claiming the victim's id (``forged-as-victim:<task>``),
   each echoing task, attempt, epoch and the token exactly as read,
3. logs ``forged 2 reports for <task>`` once both are delivered.

Run as ``python -m tests.integration.thief_worker WORKER_ID`` with VICTIM and the test's env.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, TopicPartition

from es_sched.domain import commands as c
from es_sched.kafka.clients import consumer
from es_sched.kafka.connection import connection
from es_sched.kafka.partitioner import partition_for
from es_sched.kafka.topics import assignment_topic
from es_sched.serialization import sealed, wire
from es_sched.settings import Settings
from es_sched.workers import TaskContext, Worker

log = logging.getLogger("thief")


def forge(settings: Settings, thief: Worker, victim: str, stop: threading.Event) -> None:
    thief.ready.wait()  # its partition is open: the topic exists
    partitions = settings.dispatch.assignment_partitions
    tp = TopicPartition(
        assignment_topic(settings.kafka.topic_prefix, "default"),
        partition_for(victim.encode(), partitions),
        OFFSET_BEGINNING,
    )
    # as a worker of the victim's pool reads its assignments (ADR 72's principal)
    reader = consumer(connection(settings.kafka, "worker-default"), None)
    reader.assign([tp])
    try:
        while not stop.is_set():
            msg = reader.poll(0.2)
            if msg is None or msg.error() is not None or msg.value() is None:
                continue
            record = wire.decode(msg.value())
            if isinstance(record, wire.Assignment) and record.worker_id == victim:
                steal(thief, record)
                return
    finally:
        reader.close()


def steal(thief: Worker, a: wire.Assignment) -> None:
    log.info("read %s's assignment of %s (epoch %d)", a.worker_id, a.task_id, a.lease_epoch)
    try:
        thief.lease_key.open(a.lease_token)
        log.error("opened %s's lease token", a.worker_id)  # what ADR 74 prevents
    except sealed.SealError as exc:
        log.info("cannot open %s's lease token: %s", a.worker_id, exc)
    for who in (thief.worker_id, a.worker_id):
        as_ = "thief" if who == thief.worker_id else "victim"
        thief._reporter.send(
            c.ReportCompleted(
                f"forged-as-{as_}:{a.task_id}",
                a.workflow_id,
                task_id=a.task_id,
                attempt=a.attempt,
                worker_id=who,
                lease_epoch=a.lease_epoch,
                lease_token=a.lease_token,
                output={"forged_by": thief.worker_id},
                started=True,
            )
        )
    if thief._reporter.flush(30) == 0:
        log.info("forged 2 reports for %s", a.task_id)


def main() -> None:
    logging.basicConfig(level="INFO", format="%(asctime)s %(name)s: %(message)s")
    stop = threading.Event()
    thief = Worker(pool="default", version="1.0", worker_id=sys.argv[1])

    @thief.task("thief.idle")
    def idle(ctx: TaskContext, data: dict[str, Any]) -> dict[str, Any]:
        return {}

    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    args = (thief.settings, thief, os.environ["VICTIM"], stop)
    threading.Thread(target=forge, args=args, daemon=True).start()
    thief.run(stop)


if __name__ == "__main__":
    main()
