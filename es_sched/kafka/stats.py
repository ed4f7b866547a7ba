"""The stats topic, kept: the analytics role's latest proposals, by key (ADR 64).

A role that uses what was learned (the decider's dynamic timeouts, the dispatcher's learned
cost and version rules) keeps one ``StatsView``: it reads the compacted topic from its
beginning once, then a background thread applies what arrives. Lookups never wait on Kafka; a
view that cannot reach the broker keeps answering with what it had, which is only advice.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable

from confluent_kafka import Message

from es_sched.domain.learned import FailureRate, RunStats, parse, stats_key, to_record
from es_sched.errors import EsSchedError
from es_sched.kafka.clients import producer
from es_sched.kafka.connection import KafkaConnection
from es_sched.kafka.tail import Tail

log = logging.getLogger(__name__)
Stats = RunStats | FailureRate


class StatsView:
    """The latest proposal per key on the stats topic."""

    def __init__(self, bootstrap: KafkaConnection, topic: str, refresh_s: float = 0.5) -> None:
        self.topic = topic
        self._latest: dict[str, Stats] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._refresh_s = refresh_s
        self._tail = Tail(bootstrap, topic, start=-2)  # OFFSET_BEGINNING
        self._apply(self._tail.catch_up())
        self._thread = threading.Thread(target=self._run, name="stats-view", daemon=True)
        self._thread.start()

    def runtime(self, task_type: str, size_class: str) -> RunStats | None:
        found = self.get(stats_key("runtime", task_type, size_class))
        return found if isinstance(found, RunStats) else None

    def get(self, key: str) -> Stats | None:
        with self._lock:
            return self._latest.get(key)

    def all(self) -> dict[str, Stats]:
        with self._lock:
            return dict(self._latest)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._tail.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._apply(self._tail.poll(500, self._refresh_s))
            except EsSchedError as exc:  # advice only: keep what we have, try again
                log.warning("stats view: %s", exc)
                self._stop.wait(self._refresh_s)

    def _apply(self, msgs: list[Message]) -> None:
        with self._lock:
            for msg in msgs:
                raw_key, value = msg.key(), msg.value()
                key = raw_key.decode() if isinstance(raw_key, bytes) else str(raw_key or "")
                if value is None:
                    self._latest.pop(key, None)
                    continue
                try:
                    parsed = parse(json.loads(value))
                except (ValueError, TypeError) as exc:  # not ours to refuse: skip, say so
                    log.warning("stats record %s unreadable: %s", key, exc)
                    continue
                if parsed is not None:
                    self._latest[key] = parsed


def publisher(bootstrap: KafkaConnection, topic: str) -> Callable[[Stats], None]:
    """Produce proposals (the analytics role's output, and tests that stand in for it)."""
    p = producer(bootstrap)

    def publish(stats: Stats) -> None:
        p.produce(topic, key=stats.key.encode(), value=json.dumps(to_record(stats)).encode())
        p.flush(10)

    return publish
