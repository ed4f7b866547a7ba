"""A group-less reader of every partition of a topic, from its beginning or its end.

Roles that must see a whole topic (the dispatcher's worker status, config and events) use it:
no consumer group, so no rebalance and nothing committed; ``catch_up`` reads to the end the
topic had when called, ``poll`` returns what arrived since.
"""

from __future__ import annotations

import logging
import time

from confluent_kafka import KafkaError, KafkaException, Message, TopicPartition

from es_sched.errors import InfrastructureError
from es_sched.kafka.clients import consumer, watermarks

log = logging.getLogger(__name__)


class Tail:
    """A group-less reader of every partition of a topic, from its beginning or its end."""

    def __init__(self, bootstrap: str, topic: str, start: int) -> None:
        self.topic = topic
        # Fetches answered after 10 ms, not librdkafka's 500, when nothing is new: the ends
        # catch_up asks for (a ListOffsets per partition) queue behind a fetch the broker is
        # holding, so each waited up to 500 ms; with the worker-status topic's 12 partitions
        # a GET /api/v1/workers took seconds (bench/read_to_end.py's ``tail``).
        self.consumer = consumer(bootstrap, None, **{"fetch.wait.max.ms": 10})
        deadline = time.monotonic() + 30
        while True:  # a topic created a moment ago may not be in the metadata yet
            meta = self.consumer.list_topics(topic, timeout=30).topics[topic]
            if meta.error is None and meta.partitions:
                break
            if time.monotonic() > deadline:
                raise InfrastructureError(f"cannot read topic {topic}: {meta.error}")
            time.sleep(0.2)
        self.partitions = sorted(meta.partitions)
        self.consumer.assign([TopicPartition(topic, p, start) for p in self.partitions])

    def catch_up(self, timeout_s: float = 30.0) -> list[Message]:
        """Every record up to the end the topic had when this was called."""
        try:
            highs = {
                p: watermarks(self.consumer, TopicPartition(self.topic, p))[1]
                for p in self.partitions
            }
            out: list[Message] = []
            deadline = time.monotonic() + timeout_s
            while True:
                # At the ends already (the API's worker board, asked again with nothing new):
                # done without waiting. Else the first record as it comes and what else is
                # there: consume(1000, 0.2) waited its whole 0.2 s on every short batch, so
                # each GET /api/v1/workers took at least that (kafka.clients.read_partitions).
                positions = self.consumer.position([TopicPartition(self.topic, p) for p in highs])
                if all(tp.offset >= highs[tp.partition] or highs[tp.partition] == 0
                       for tp in positions):  # fmt: skip
                    return out
                if time.monotonic() >= deadline:
                    break
                first = self.poll(1, 0.2)
                out += first + (self.poll(999, 0) if first else [])
        except KafkaException as exc:  # a broker away or slow: the caller decides to wait
            raise InfrastructureError(f"catching up with {self.topic}: {exc}") from exc
        raise InfrastructureError(f"catching up with {self.topic} took over {timeout_s}s")

    def poll(self, limit: int = 500, timeout_s: float = 0.0) -> list[Message]:
        msgs = self.consumer.consume(limit, timeout_s)
        return [m for m in msgs if m.error() is None or self._error(m)]

    def _error(self, msg: Message) -> bool:
        err = msg.error()
        if err is not None and err.code() != KafkaError._PARTITION_EOF:
            log.warning("reading %s: %s", self.topic, err)
        return False
