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
from es_sched.kafka.clients import consumer
from es_sched.kafka.connection import KafkaConnection
from es_sched.kafka.partition_ends import Ends

log = logging.getLogger(__name__)
ENDS_S = 15.0  # one partition's end asked of the broker, at most


class Tail:
    """A group-less reader of every partition of a topic, from its beginning or its end."""

    def __init__(self, bootstrap: KafkaConnection, topic: str, start: int) -> None:
        self.topic = topic
        # The broker may hold an idle fetch until a record comes (librdkafka's
        # fetch.wait.max.ms), so an idle tail does not fetch again and again; catch_up
        # therefore asks the ends on a client of their own (``kafka.partition_ends``): asked
        # here, each ListOffsets would queue behind the held fetch (the ``tail`` figures of
        # bench/results/current/read_to_end.json and
        # bench/results/archive/client_requests_ends_client.json).
        self.consumer = consumer(bootstrap, None)
        self._bootstrap = bootstrap
        self._ends: Ends | None = None  # made by the first catch_up
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
            ends = self._ends = self._ends or Ends(self._bootstrap)
            highs = {p: ends.high(TopicPartition(self.topic, p), ENDS_S) for p in self.partitions}
            out: list[Message] = []
            deadline = time.monotonic() + timeout_s
            while True:
                # At the ends already (the API's worker board, asked again with nothing new):
                # done without waiting. Else the first record as it comes and what else is
                # there: a single consume(n, timeout) waits out its whole timeout on every batch
                # short of n, and each GET /api/v1/workers would pay it
                # (kafka.clients.read_partitions).
                positions = self.consumer.position([TopicPartition(self.topic, p) for p in highs])
                if all(
                    tp.offset >= highs[tp.partition] or highs[tp.partition] == 0 for tp in positions
                ):
                    return out
                if time.monotonic() >= deadline:
                    break
                first = self.poll(1, 0.2)
                out += first + (self.poll(999, 0) if first else [])
        except KafkaException as exc:  # a broker away or slow: the caller decides to wait
            raise InfrastructureError(f"catching up with {self.topic}: {exc}") from exc
        raise InfrastructureError(f"catching up with {self.topic} took over {timeout_s}s")

    def close(self) -> None:
        self.consumer.close()
        if self._ends is not None:
            self._ends.close()

    def poll(self, limit: int = 500, timeout_s: float = 0.0) -> list[Message]:
        msgs = self.consumer.consume(limit, timeout_s)
        return [m for m in msgs if m.error() is None or self._error(m)]

    def _error(self, msg: Message) -> bool:
        err = msg.error()
        if err is not None and err.code() != KafkaError._PARTITION_EOF:
            log.warning("reading %s: %s", self.topic, err)
        return False
