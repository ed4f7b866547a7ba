"""Everything the dispatcher writes, through one idempotent producer, and waiting for it.

Assignments and cancels (assignments topics), ``DispatchTask``/``ExpireLease`` (task-results),
lease journal records (``<prefix>.leases``) and dead letters. A record's time is the one the
dispatcher gives it, so rates are measurable on the topics themselves: the decision's, or for
what waits for a delivery first (an assignment and its lease) the time it leaves.
``delivered_all`` is the dispatcher's one ordering tool: what must be on the broker before
something else is produced (a take-back before a later grant of its task, a grant and its
``DispatchTask`` before the assignment, everything before ready offsets are committed) is
waited for with it. It waits out a broker outage, returns False once the role is stopping, and
raises ``InfrastructureError`` for a record the broker refused for good.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

from confluent_kafka import KafkaError, Message, Producer

from es_sched.errors import EsSchedError, InfrastructureError
from es_sched.kafka.dead_letters import headers_for

log = logging.getLogger("es_sched.dispatcher")
FLUSH_S = 1.0  # one wait for deliveries; repeated until done, the stop flag checked between


class Output:
    def __init__(
        self, producer: Producer, dead_letters: str, role: str, stopping: Callable[[], bool]
    ) -> None:
        self.producer, self.dead_letters, self.role = producer, dead_letters, role
        self.stopping = stopping
        self.failures: list[str] = []

    def produce(
        self, topic: str, key: str, value: bytes | None, now: datetime, partition: int = -1
    ) -> None:
        """``value`` None is a tombstone; ``partition`` -1 lets the key choose."""
        self.producer.produce(
            topic,
            key=key.encode(),
            value=value,
            partition=partition,
            timestamp=int(now.timestamp() * 1000),
            on_delivery=self._delivered,
        )
        self.producer.poll(0)

    def dead(self, msg: Message, exc: EsSchedError) -> None:
        log.warning("dead-lettering %s@%s/%s: %s", msg.topic(), msg.partition(), msg.offset(), exc)
        self.producer.produce(
            self.dead_letters,
            key=msg.key(),
            value=msg.value(),
            headers=headers_for(msg, str(exc), type(exc).__name__, self.role),
            on_delivery=self._delivered,
        )

    def delivered_all(self) -> bool:
        """Wait until the producer delivered everything (a broker outage is waited out); False
        if the role was stopped first. A record the broker refused for good raises."""
        while True:
            left = self.producer.flush(FLUSH_S)
            if self.failures:
                raise InfrastructureError(
                    f"dispatcher could not deliver records: {self.failures[:3]}"
                )
            if not left:
                return True
            if self.stopping():
                return False
            log.warning("dispatcher: %d records not delivered yet; waiting for the broker", left)

    def _delivered(self, err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            self.failures.append(f"{msg.topic()}: {err}")
