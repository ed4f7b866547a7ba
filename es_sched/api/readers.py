"""Kafka views the API keeps up to date in the background: the events topic's ends and the
fleet (the worker-status topic folded by worker, and the config topic: bans, pools,
blacklistings).
Definitions come from the command client's registry (``CommandClient.definitions``).

Nothing here is read per request (ADR 57). Each view is a ``Kept``: one daemon thread per API
process that refreshes it every ``ES_SCHED_API_ENDS_REFRESH_S`` with Kafka clients only that
thread uses, and hands the routes the last value it read with the time it was read. Routes
never wait on the broker (only the first answer of a process waits for the first read), and
several API processes need nothing shared: each keeps its own. ``Services.close`` stops the
threads and closes their clients (the views live in ``Services.event_ends`` and
``Services.worker_board``).

Honesty of the lag (``read_model_freshness.freshness_of``): an ``Ends`` holds the ends the log
had at least at ``read_at`` (the clock is read before the broker is asked, and a log only
grows), so every event the log held at ``read_at`` counts; an answer's lag is never understated
for the log as it was at ``read_at``, whose age the answer states (``endsAgeMs``,
``endsReadAt``). Events appended since then are not counted: that is what the age says.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Generic, Protocol, TypeVar

from confluent_kafka import TopicPartition

from es_sched.api.services import Services
from es_sched.errors import InfrastructureError, SchemaError
from es_sched.kafka import config_client
from es_sched.kafka.clients import consumer
from es_sched.kafka.connection import KafkaConnection, connection
from es_sched.kafka.partition_ends import Ends as PartitionEnds
from es_sched.kafka.tail import Tail
from es_sched.kafka.topics import topics_for
from es_sched.projections.read_your_writes import last_record_end
from es_sched.serialization import wire

log = logging.getLogger(__name__)
FIRST_READ_S = 10.0  # the longest the first answer of a process waits for the first read
CATCH_UP_S = 5.0  # one broker read, bounded
RECORD_POLL_S = 0.05  # one wait for the next record while finding where the last one ends
T = TypeVar("T")


class Kept(Generic[T]):
    """A value one background thread reads every ``period_s``; ``get`` answers the last one.

    ``read`` runs on that thread only (its clients need no lock); a failed read is logged and
    tried again next period, and the answer keeps its older ``read_at`` meanwhile (the age
    says how old it is). ``start`` begins the thread; ``refresh`` runs one read where the
    caller is (tests drive it so, with fakes)."""

    def __init__(self, read: Callable[[T | None], T], period_s: float, name: str) -> None:
        self._read, self._period, self._name = read, period_s, name
        self._value: T | None = None
        self._began = float("-inf")  # when the read that made ``_value`` began (monotonic)
        self._newer = threading.Condition()
        self._ready = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.failures = 0

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
        self._thread.start()

    def refresh(self) -> None:
        began = time.monotonic()
        value = self._read(self._value)
        with self._newer:
            self._value, self._began = value, began  # one swap: readers see old or new
            self._newer.notify_all()
        self._ready.set()

    def after(self, began: float, wait_s: float) -> T:
        """The first value read by a read that began at or after ``began`` (monotonic): one
        that holds whatever the broker acknowledged before then, so a write's answer can wait
        for its own effect (ADR 56) without reading on the request's thread."""
        deadline = time.monotonic() + wait_s
        with self._newer:
            while self._began < began:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise InfrastructureError(
                        f"{self._name}: no read since the write in {wait_s:g}s"
                    )
                self._newer.wait(left)
            value = self._value
        assert value is not None
        return value

    def get(self, wait_s: float = FIRST_READ_S) -> T:
        if not self._ready.wait(wait_s):
            raise InfrastructureError(f"{self._name}: no read within {wait_s:g}s")
        value = self._value
        assert value is not None  # set before _ready
        return value

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(CATCH_UP_S * 2)

    def _run(self) -> None:
        streak = 0  # failed reads in a row: logged when it starts and when it ends
        while not self._stop.is_set():
            try:
                self.refresh()
            except Exception:  # a broker away: the answer's age grows, and the log says why
                self.failures += 1
                streak += 1
                if streak == 1:
                    log.warning("%s: read failed, kept the older value", self._name, exc_info=True)
            else:
                if streak:
                    log.info("%s: read again after %d failed reads", self._name, streak)
                streak = 0
            self._stop.wait(self._period)


@dataclass(frozen=True)
class Ends:
    """The events topic's ends as the log had them at least at ``read_at``.

    ``high``: the high watermarks; ``records``: the offset after the last record (not control
    marker) below each. A transaction's commit marker stands at the end of an idle partition and
    no projection's checkpoint counts it, so the lag is measured to ``records``."""

    high: dict[int, int]
    records: dict[int, int]
    read_at: float  # time.monotonic(), taken before the broker was asked
    read_at_wall: datetime

    def age_s(self, now: float | None = None) -> float:
        return max(0.0, (time.monotonic() if now is None else now) - self.read_at)


class EndsSource(Protocol):
    """What ``read_ends`` asks the broker (a Kafka one in ``event_ends``; fakes in tests)."""

    def highs(self) -> dict[int, int]: ...

    def record_end(self, partition: int, low: int, high: int) -> int: ...


def read_ends(source: EndsSource, before: Ends | None, clock: Callable[[], float]) -> Ends:
    """One read of the ends. The clock first: the ends read after it are at least the log's at
    that moment. A partition whose high watermark has not moved keeps its record end (the log
    is append-only); one that moved is read back from its end, at most down to the older
    record end."""
    at, wall = clock(), datetime.now(UTC)
    high = source.highs()
    records: dict[int, int] = {}
    for p, h in high.items():
        low = min(h, before.records.get(p, 0)) if before is not None else 0
        if before is not None and before.high.get(p) == h:
            records[p] = before.records[p]
        elif h <= low:
            records[p] = h  # nothing past the older record end (or an empty partition)
        else:
            records[p] = max(low, min(h, source.record_end(p, low, h)))
    return Ends(high, records, at, wall)


class KafkaEnds:
    """``EndsSource`` on two clients of its own: one asks the ends (``partition_ends.Ends``, a
    client that does nothing else), one reads the last records."""

    def __init__(self, bootstrap: KafkaConnection, topic: str) -> None:
        self.topic = topic
        self._ends = PartitionEnds(bootstrap)
        self._probe = consumer(bootstrap, None)
        self._partitions: list[int] = []

    def highs(self) -> dict[int, int]:
        if not self._partitions:
            meta = self._probe.list_topics(self.topic, timeout=CATCH_UP_S)
            found = meta.topics.get(self.topic)
            if found is None or found.error is not None or not found.partitions:
                raise InfrastructureError(f"cannot read topic {self.topic}")
            self._partitions = sorted(found.partitions)
        return {
            p: self._ends.high(TopicPartition(self.topic, p), CATCH_UP_S) for p in self._partitions
        }

    def record_end(self, partition: int, low: int, high: int) -> int:
        deadline = time.monotonic() + CATCH_UP_S
        tp = TopicPartition(self.topic, partition)
        return last_record_end(self._probe, tp, low, high, deadline, RECORD_POLL_S)

    def close(self) -> None:
        self._ends.close()
        self._probe.close()


class EventEnds:
    """The events topic's ends, kept by a background thread (``Kept``)."""

    def __init__(
        self,
        topic: str,
        source: EndsSource,
        period_s: float,
        clock: Callable[[], float] = time.monotonic,
        close: Callable[[], None] = lambda: None,
    ) -> None:
        self.topic = topic
        self.kept: Kept[Ends] = Kept(
            lambda before: read_ends(source, before, clock), period_s, f"ends of {topic}"
        )
        self._close = close

    def get(self) -> Ends:
        return self.kept.get()

    def close(self) -> None:
        self.kept.close()
        self._close()


@dataclass
class Fleet:
    """The latest ``WorkerStatus`` per worker, the config topic and its banned versions, as read
    at ``read_at``."""

    workers: dict[str, wire.WorkerStatus] = field(default_factory=dict)
    read_up_to: dict[int, int] = field(default_factory=dict)
    banned: frozenset[str] = frozenset()
    unreadable: int = 0
    read_at: float = 0.0
    config: dict[str, dict[str, Any]] = field(default_factory=dict)  # the config topic by key

    def age_s(self, now: float | None = None) -> float:
        return max(0.0, (time.monotonic() if now is None else now) - self.read_at)


class WorkerBoard:
    """The worker-status topic folded by worker (a tombstone, a worker that left, removes it)
    and the config topic (its ``ban-version:``, ``pool:`` and ``blacklist:`` keys are what the
    fleet's answers use), kept by a background thread (``Kept``)."""

    def __init__(
        self,
        statuses: Tail,
        config: Tail,
        period_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._statuses, self._config, self._clock = statuses, config, clock
        self._settings: dict[str, dict[str, Any]] = {}
        self.kept: Kept[Fleet] = Kept(self._read, period_s, f"fleet of {statuses.topic}")

    def _read(self, before: Fleet | None) -> Fleet:
        at = self._clock()
        old = before or Fleet()
        workers, read_up_to, unreadable = dict(old.workers), dict(old.read_up_to), old.unreadable
        for msg in self._statuses.catch_up(CATCH_UP_S):
            raw_key, value = msg.key(), msg.value()
            key = raw_key.decode() if isinstance(raw_key, bytes) else (raw_key or "")
            read_up_to[msg.partition() or 0] = (msg.offset() or 0) + 1
            if value is None:
                workers.pop(key, None)
                continue
            try:
                record = wire.decode(value if isinstance(value, bytes) else value.encode())
            except SchemaError:
                unreadable += 1  # the dispatcher dead-letters it; we skip it
                continue
            if isinstance(record, wire.WorkerStatus):
                workers[record.worker_id] = record
        config_client.fold(self._config.catch_up(CATCH_UP_S), self._settings)
        banned = frozenset(
            k.removeprefix("ban-version:") for k in self._settings if k.startswith("ban-version:")
        )
        return Fleet(workers, read_up_to, banned, unreadable, at, dict(self._settings))

    def snapshot(self) -> Fleet:
        return self.kept.get()

    def close(self) -> None:
        self.kept.close()
        self._statuses.close()
        self._config.close()


def event_ends(svc: Services) -> EventEnds:
    def make() -> EventEnds:
        topic = topics_for(svc.settings).events
        source = KafkaEnds(connection(svc.settings.kafka), topic)
        ends = EventEnds(topic, source, svc.settings.api.ends_refresh_s, close=source.close)
        ends.kept.start()
        return ends

    return svc.event_ends.get(make)


def worker_board(svc: Services) -> WorkerBoard:
    def make() -> WorkerBoard:
        topics, bootstrap = topics_for(svc.settings), connection(svc.settings.kafka)
        board = WorkerBoard(
            Tail(bootstrap, topics.worker_status, 0),
            Tail(bootstrap, topics.config, 0),
            svc.settings.api.ends_refresh_s,
        )
        board.kept.start()
        return board

    return svc.worker_board.get(make)
