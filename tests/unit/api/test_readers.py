"""The views the API keeps in the background (``api.readers``, ADR 57) with fakes for the
broker: what one read asks, what the answers say about their age, and the lag ``freshness_of``
reports from them (never understated for the log as it was when its ends were read)."""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Any

import pytest

from es_sched import bootstrap
from es_sched.api.read_model_freshness import freshness_of
from es_sched.api.readers import EventEnds, Kept, WorkerBoard, read_ends
from es_sched.errors import InfrastructureError
from es_sched.serialization import config as dc
from es_sched.serialization import wire
from es_sched.settings import ApiSettings, load_settings
from tests.unit.dispatch.fakes import PART, Record

pytestmark = pytest.mark.unit
TOPIC = "p.events"


class FakeEnds:
    """The broker's side of ``read_ends``: high watermarks, and where the last record below
    each ends (``marker``: how many offsets at the end hold commit markers, not records)."""

    def __init__(self, high: dict[int, int], markers: dict[int, int], clock: FakeClock) -> None:
        self.high, self.markers, self.clock = high, markers, clock
        self.asked: list[tuple[int, int, int]] = []
        self.highs_read_at: list[float] = []

    def highs(self) -> dict[int, int]:
        self.highs_read_at.append(self.clock())
        return dict(self.high)

    def record_end(self, partition: int, low: int, high: int) -> int:
        self.asked.append((partition, low, high))
        return max(low, high - self.markers.get(partition, 0))


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        self.now += 1.0  # each look at the clock is a moment later
        return self.now


def test_one_read_measures_each_partition_to_its_last_record_and_only_what_moved() -> None:
    clock = FakeClock()
    broker = FakeEnds({0: 10, 1: 0, 2: 7}, {0: 1, 2: 1}, clock)
    first = read_ends(broker, None, clock)
    assert first.high == {0: 10, 1: 0, 2: 7}
    assert first.records == {0: 9, 1: 0, 2: 6}  # a commit marker last: no record there
    assert broker.asked == [(0, 0, 10), (2, 0, 7)]  # an empty partition is not read
    broker.asked.clear()
    broker.high[0] = 14  # one more transaction on partition 0, the others idle
    second = read_ends(broker, first, clock)
    assert second.records == {0: 13, 1: 0, 2: 6}
    assert broker.asked == [(0, 9, 14)]  # read back no further than the older record end


def test_the_clock_is_read_before_the_broker_so_the_age_never_flatters() -> None:
    clock = FakeClock()
    broker = FakeEnds({0: 3}, {}, clock)
    ends = read_ends(broker, None, clock)
    assert ends.read_at < broker.highs_read_at[0]
    assert ends.age_s(ends.read_at + 0.25) == pytest.approx(0.25)


def test_a_failed_read_keeps_the_older_value_and_is_counted() -> None:
    values = iter([1, 2])
    outcomes: list[Any] = [None, RuntimeError("broker away"), None]

    def read(before: int | None) -> int:
        fault = outcomes.pop(0)
        if fault is not None:
            raise fault
        return next(values)

    kept: Kept[int] = Kept(read, 60.0, "test")
    with pytest.raises(InfrastructureError, match="no read within"):
        kept.get(wait_s=0)
    kept.refresh()
    assert kept.get() == 1
    with pytest.raises(RuntimeError):
        kept.refresh()
    assert kept.get() == 1
    kept.refresh()
    assert kept.get() == 2


def test_the_thread_reads_in_the_background_and_stops_on_close() -> None:
    reads = threading.Semaphore(0)
    seen: list[int | None] = []

    def read(before: int | None) -> int:
        seen.append(before)
        reads.release()
        return len(seen)

    kept: Kept[int] = Kept(read, 0.001, "test")
    kept.start()
    for _ in range(3):
        assert reads.acquire(timeout=10), "the thread read again"
    kept.close()
    stopped_at = len(seen)
    assert kept.get() >= 3 and seen[:3] == [None, 1, 2]  # each read is handed the one before
    kept.refresh()  # the caller's own read, after the thread ended
    assert len(seen) == stopped_at + 1


def services_with(ends: EventEnds, reflects: dict[int, int]) -> Any:
    settings = replace(load_settings(), api=ApiSettings(auth="off"))
    svc = bootstrap.api_services(settings)

    class Reflected:
        def get(self) -> dict[str, dict[int, int]]:
            return {TOPIC: dict(reflects)}

    svc.event_ends.put(ends)
    svc.reflected.put(Reflected())  # type: ignore[arg-type]
    return svc


def test_an_idle_partition_ending_in_a_commit_marker_reports_no_lag() -> None:
    clock = FakeClock()
    broker = FakeEnds({0: 10, 1: 4}, {0: 1, 1: 1}, clock)
    ends = EventEnds(TOPIC, broker, 60.0, clock)
    ends.kept.refresh()
    fresh = freshness_of(services_with(ends, {0: 9, 1: 3}))
    assert (fresh.lag, fresh.lagging) == ({0: 0, 1: 0}, False)
    assert fresh.reflects == {0: 9, 1: 3}
    assert fresh.endsAgeMs >= 0 and fresh.endsReadAt is not None


def test_the_lag_counts_every_record_the_log_held_when_its_ends_were_read() -> None:
    clock = FakeClock()
    broker = FakeEnds({0: 10, 1: 4}, {0: 1, 1: 1}, clock)
    ends = EventEnds(TOPIC, broker, 60.0, clock)
    ends.kept.refresh()
    svc = services_with(ends, {0: 5, 1: 3})
    assert freshness_of(svc).lag == {0: 4, 1: 0}  # records 5..8 of partition 0 not reflected
    broker.high = {0: 10, 1: 9}  # partition 1 grows; the kept ends have not seen it yet
    assert freshness_of(svc).lag == {0: 4, 1: 0}  # as of the ends' read, which the age states
    ends.kept.refresh()
    assert freshness_of(svc).lag == {0: 4, 1: 5}
    assert freshness_of(services_with(ends, {0: 0, 1: 0})).lag == {0: 9, 1: 8}


class FakeTail:
    """``kafka.tail.Tail``: ``catch_up`` hands what was put in ``records`` since the last one."""

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self.records: list[Any] = []
        self.closed = False

    def catch_up(self, timeout_s: float = 30.0) -> list[Any]:
        taken, self.records = self.records, []
        return taken

    def close(self) -> None:
        self.closed = True


def test_the_fleet_folds_statuses_by_worker_and_bans_by_version() -> None:
    statuses, config = FakeTail("p.worker-status"), FakeTail("p.config")
    board = WorkerBoard(statuses, config, 60.0, FakeClock())  # type: ignore[arg-type]
    w1 = wire.WorkerStatus("w1", "default", "1.0", ["t"], 4, 8000)
    w2 = wire.WorkerStatus("w2", "default", "2.0", ["t"], 4, 8000)
    statuses.records = [
        Record("p.worker-status", wire.encode(w1), 0, "w1"),
        Record("p.worker-status", wire.encode(w2), 1, "w2"),
        Record("p.worker-status", b"not json", 2, "w3"),
    ]
    config.records = [Record("p.config", dc.encode({}), 0, "ban-version:2.0")]
    board.kept.refresh()
    fleet = board.snapshot()
    assert sorted(fleet.workers) == ["w1", "w2"] and fleet.unreadable == 1
    assert fleet.banned == frozenset({"2.0"}) and fleet.read_up_to == {PART: 3}
    statuses.records = [Record("p.worker-status", None, 3, "w2")]  # w2 left
    config.records = [Record("p.config", None, 1, "ban-version:2.0")]  # the ban lifted
    board.kept.refresh()
    later = board.snapshot()
    assert sorted(later.workers) == ["w1"] and later.banned == frozenset()
    assert sorted(fleet.workers) == ["w1", "w2"], "an answer handed out does not change"
    board.close()
    assert statuses.closed and config.closed
