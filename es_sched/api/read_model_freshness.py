"""How far the rows of an answer are behind the events log, and read-your-writes (ADR 23, 28).

Every read says which events offsets its PostgreSQL rows reflect (``reflected``: the
projection's checkpoint per events partition, a lower bound cached briefly) and whether the log
holds more than that, so a list and a detail page read at different moments never disagree
silently (both read the same rows; the lag says when those rows are behind). The checkpoints
are a lower bound of what the rows reflect and the ends a lower bound of what the log held when
they were read, so the lag is never understated for the log as it was when its ends were read;
the answer says when that was. Two answers need it:

- ``freshness_of``, for ``/api/v1`` and the console's operations pages
  (``api.native.models.Freshness``): the lag per partition against the ends one background
  thread per API process keeps (``readers.EventEnds``, every ``ES_SCHED_API_ENDS_REFRESH_S``;
  ADR 57): no request reads the broker. The answer states when those ends were read
  (``endsReadAt``, ``endsAgeMs``); every event the log held then counts, so the lag is never
  understated for the log as it was then. A high watermark can sit one past a projection's
  checkpoint for ever (a transaction's commit marker takes an offset that holds no record), so
  each partition is measured to the end of its last record (``readers.Ends.records``).
- ``page_freshness``, for the console's workflow pages (``PageFreshness``): one total, "about"
  N records. The ends come from one Kafka consumer per API process, cached for
  ``console_lag_cache_s`` (``LogEnds``): a page costs one indexed PostgreSQL read, not a
  broker round trip per partition; so a partition counts only when its end is beyond the
  checkpoint by more than that commit marker (``MARKER``).

``wait_after`` serves ``?after=TOKEN`` for a token from elsewhere (another API process, the
CLI): every write through this API already answers once its effect is visible
(``es_sched.api.writes``, ADR 56). It waits with the same ``Settler`` (one decider probe per
process), which blocks: the routes that call it are plain ``def`` routes, which FastAPI runs
in its thread pool, so the event loop never waits on it; the wait is bounded by
``ES_SCHED_API_READ_YOUR_WRITES_TIMEOUT_S`` and answers 504 with the reason when it runs out.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from confluent_kafka import Consumer, TopicPartition
from starlette.concurrency import run_in_threadpool

from es_sched.api.errors import ApiError
from es_sched.api.native.models import Freshness
from es_sched.api.readers import event_ends
from es_sched.api.reflected import reflected, reflected_is_fresh
from es_sched.api.services import Services
from es_sched.api.writes import settler
from es_sched.kafka.clients import consumer, watermarks
from es_sched.kafka.connection import connection
from es_sched.kafka.topics import topics_for
from es_sched.projections import read_your_writes

MARKER = 1  # a transaction's commit marker: one offset past the last record


def freshness_of(svc: Services) -> Freshness:
    """The checkpoints (a lower bound of what the rows reflect), then the ends the background
    reader kept (``readers.EventEnds``): the log held at least those at ``endsReadAt``, so the
    lag counts every event the log held then and the rows do not reflect — never understated
    for the log as it was ``endsAgeMs`` ago. Nothing here waits on the broker."""
    ends_reader = event_ends(svc)
    topic = ends_reader.topic
    reflects = reflected(svc, topic)  # a lower bound, cached briefly (es_sched.api.reflected)
    ends = ends_reader.get()
    lag = {p: max(0, end - reflects.get(p, 0)) for p, end in ends.records.items()}
    return Freshness(
        topic=topic,
        reflects={p: reflects.get(p, 0) for p in ends.records},
        lag=lag,
        lagging=any(lag.values()),
        endsReadAt=ends.read_at_wall,
        endsAgeMs=round(ends.age_s() * 1000, 1),
    )


def wait_after(svc: Services, after: str | None) -> None:
    """Block until the read model has the events of the command ``after`` names (or 504)."""
    if after is None:
        return
    token = read_your_writes.Token.parse(after)  # an EsSchedError: 400 with the expected shape
    timeout = svc.settings.api.read_your_writes_timeout_s
    try:
        settler(svc).wait(token, timeout)
    except read_your_writes.NotFreshYet as exc:
        raise ApiError(504, f"not reflected within {timeout:g}s: {exc}") from None


@dataclass(frozen=True)
class PageFreshness:
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
    def make() -> LogEnds:
        settings = svc.settings
        topic = topics_for(settings).events
        probe: Consumer = consumer(connection(settings.kafka), None)

        def read() -> dict[int, int]:
            meta = probe.list_topics(topic, timeout=5).topics[topic]
            return {p: watermarks(probe, TopicPartition(topic, p), 5)[1] for p in meta.partitions}

        return LogEnds(read, settings.api.console_lag_cache_s, probe.close)

    return svc.log_ends.get(make)


def page_freshness(svc: Services) -> PageFreshness:
    topic = topics_for(svc.settings).events
    reflects = reflected(svc, topic)  # a lower bound, cached briefly (es_sched.api.reflected)
    ends = _log_ends(svc).get()
    return PageFreshness(topic, reflects, ends, lag_of(reflects, ends) if ends else 0)


async def page_freshness_async(svc: Services) -> PageFreshness:
    """``page_freshness`` for a coroutine: on the event loop when both caches are fresh, else
    on a thread (a broker or PostgreSQL read)."""
    ends = svc.log_ends.peek()
    if ends is not None and ends.fresh and reflected_is_fresh(svc):
        return page_freshness(svc)
    return await run_in_threadpool(page_freshness, svc)
