"""Where a partition ends, asked on a client that does nothing else.

A reader that lets the broker hold its fetches open (``fetch.wait.max.ms``: the broker answers
as soon as a record comes, and otherwise once that long) cannot ask its own client where a
partition ends: the broker answers the requests of one connection in order, so the ListOffsets
would wait out the held fetch. Making the broker answer every fetch at once instead costs it a
fetch after fetch from every idle reader. ``Ends`` is the second client: the worker's reader
asks it before a start (its catch-up), the dispatcher's and the API's tails (``kafka.tail``) on
each catch-up.

It only ever sends ListOffsets to the leader its metadata names, and nothing else it does
refreshes that metadata (no fetch, no produce; librdkafka's periodic refresh is minutes apart):
once a broker that led the partition is gone (kill -9 of one node of three) it would ask the
dead node forever, and a worker, which starts no task before it has read up to that end, would
stall for good (``tests/integration/test_cluster.py`` met it). So a failed query replaces the
client: a new one bootstraps and looks the leader up afresh; at most every ``RENEW_S``, so a
whole-cluster outage does not churn clients.
"""

from __future__ import annotations

import time

from confluent_kafka import KafkaException, TopicPartition

from es_sched.kafka.clients import consumer, watermarks
from es_sched.kafka.connection import KafkaConnection

RENEW_S = 3.0  # the least time between two replacements of the client


class Ends:
    def __init__(self, bootstrap: KafkaConnection) -> None:
        self._bootstrap = bootstrap
        self._client = consumer(bootstrap, None)
        self._renew_at = 0.0

    def high(self, tp: TopicPartition, timeout_s: float) -> int:
        """``tp``'s end as the broker has it now (one round trip; ``read_committed``: the last
        stable offset; a topic whose leaders are not elected yet is waited for, within
        ``timeout_s``). Raises ``KafkaException``; after a failure the next query goes to a new
        client (at most every ``RENEW_S``)."""
        try:
            high = watermarks(self._client, tp, timeout_s)[1]
        except KafkaException:
            if time.monotonic() >= self._renew_at:
                old, self._client = self._client, consumer(self._bootstrap, None)
                self._renew_at = time.monotonic() + RENEW_S
                old.close()
            raise
        return high

    def close(self) -> None:
        self._client.close()
