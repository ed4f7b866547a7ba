"""What a console page reflects, and whether the read model lags the log.

Every page shows the events offsets its PostgreSQL rows reflect (``queries.reflected``) and,
when the events topic holds more than that, a notice saying how far behind the rows are, so a
list and a detail page read at different moments never disagree silently (both read the same
rows; the notice says when those rows are behind). The log's ends (high watermarks) come from
one Kafka consumer per API process and are cached for ``console_lag_cache_s``: a page costs one
indexed PostgreSQL read, not a broker round trip per partition.

A high watermark can sit one past a projection's checkpoint for ever (a transaction's commit
marker takes an offset that holds no record), so a lag counts only partitions whose end is
beyond the checkpoint by more than that marker; the notice speaks of "about" N records.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from confluent_kafka import Consumer, TopicPartition
from starlette.concurrency import run_in_threadpool

from es_sched.api.reflected import reflected, reflected_is_fresh
from es_sched.api.services import Services
from es_sched.kafka.clients import consumer, watermarks
from es_sched.kafka.topics import topics_for

EXTRA = "console.log_ends"
MARKER = 1  # a transaction's commit marker: one offset past the last record


@dataclass(frozen=True)
class Freshness:
    topic: str
    reflected: dict[int, int]  # partition -> next offset the rows reflect
    ends: dict[int, int] | None  # partition -> the log's end; None: the broker did not answer
    lag: int  # records (about) the rows are behind the log; 0: caught up or unknown

    @property
    def offsets(self) -> str:
        return " ".join(f"{p}:{o}" for p, o in sorted(self.reflected.items())) or "none yet"


def lag_of(reflected: dict[int, int], ends: dict[int, int]) -> int:
    behind = (end - reflected.get(p, 0) for p, end in ends.items())
    return sum(b for b in behind if b > MARKER)


class LogEnds:
    """The events topic's high watermarks, read at most once per ``ttl_s`` (thread-safe)."""

    def __init__(
        self, read: Callable[[], dict[int, int]], ttl_s: float, close: Callable[[], None]
    ) -> None:
        self._read, self._ttl, self._close = read, ttl_s, close
        self._lock = threading.Lock()
        self._at = -1e18
        self._value: dict[int, int] | None = None

    def get(self) -> dict[int, int] | None:
        """When the value is older than the ttl, one thread reads the broker again while the
        others answer with the older ends (pages do not queue behind a broker round trip)."""
        if time.monotonic() - self._at < self._ttl:
            return self._value
        if not self._lock.acquire(blocking=self._at < 0):  # the first read: wait for it
            return self._value
        try:
            if time.monotonic() - self._at >= self._ttl:
                try:
                    self._value = self._read()
                except Exception:  # noqa: BLE001 - a page shows "unknown", never fails on it
                    self._value = None
                self._at = time.monotonic()
            return self._value
        finally:
            self._lock.release()

    @property
    def fresh(self) -> bool:
        """Whether ``get`` would answer without reading the broker."""
        return time.monotonic() - self._at < self._ttl

    def close(self) -> None:
        self._close()


def _log_ends(svc: Services) -> LogEnds:
    found = svc.extras.get(EXTRA)
    if isinstance(found, LogEnds):
        return found
    settings = svc.settings
    topic = topics_for(settings).events
    probe: Consumer = consumer(settings.kafka.bootstrap_servers, None)

    def read() -> dict[int, int]:
        meta = probe.list_topics(topic, timeout=5).topics[topic]
        return {p: watermarks(probe, TopicPartition(topic, p), 5)[1] for p in meta.partitions}

    ends = LogEnds(read, settings.api.console_lag_cache_s, probe.close)
    return svc.extras.setdefault(EXTRA, ends)  # type: ignore[no-any-return]


def freshness(svc: Services) -> Freshness:
    topic = topics_for(svc.settings).events
    reflects = reflected(svc, topic)  # a lower bound, cached briefly (es_sched.api.reflected)
    ends = _log_ends(svc).get()
    return Freshness(topic, reflects, ends, lag_of(reflects, ends) if ends else 0)


async def freshness_async(svc: Services) -> Freshness:
    """``freshness`` for a coroutine: on the event loop when both caches are fresh, else on a
    thread (a broker or PostgreSQL read)."""
    ends = svc.extras.get(EXTRA)
    if isinstance(ends, LogEnds) and ends.fresh and reflected_is_fresh(svc):
        return freshness(svc)
    return await run_in_threadpool(freshness, svc)
