"""The dispatcher's tick without a broker (ADR 31): a ready record ends the wait at once, and
ready offsets are committed at most every ``commit_every_ms``, always after a delivery."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from confluent_kafka import TopicPartition

from es_sched.dispatch.dispatcher import Dispatcher
from es_sched.dispatch.journal import LeaseJournal
from tests.support.settings import private_vars, settings_with
from tests.unit.dispatch.test_journal import T0, FakeOutput, ready, worker


class FakeTail:
    def poll(self, *_: Any) -> list[Any]:
        return []


class FakeReady:
    """The ready consumer: what the tick asked of it, and what it commits."""

    def __init__(self, out: FakeOutput) -> None:
        self.out = out
        self.records: list[Any] = []
        self.calls: list[tuple[Any, ...]] = []

    def poll(self, timeout: float) -> Any:
        self.calls.append(("poll", timeout))
        return self.records.pop(0) if self.records else None

    def consume(self, n: int, timeout: float) -> list[Any]:
        self.calls.append(("consume", n, timeout))
        taken, self.records = self.records[:n], self.records[n:]
        return taken

    def commit(self, offsets: list[TopicPartition], asynchronous: bool) -> None:
        self.out.log.append(("commit",))

    def assignment(self) -> list[TopicPartition]:
        return []

    def position(self, parts: list[TopicPartition]) -> list[TopicPartition]:
        return parts


def dispatcher(
    commit_every_ms: int = 200, clock: Callable[[], datetime] = lambda: T0
) -> tuple[Dispatcher, FakeOutput, FakeReady]:
    """A dispatcher on fakes (no broker), with one worker ``w1`` of 100 cpus."""
    vars_ = {**private_vars("p"), "ES_SCHED_DISPATCH_COMMIT_EVERY_MS": str(commit_every_ms)}
    d = Dispatcher(settings_with(vars_), clock=clock, token=lambda: "tok")
    out = FakeOutput()
    d.output = out  # type: ignore[assignment]
    d.journal = LeaseJournal("unused:9092", d.topics.leases, out)  # type: ignore[arg-type]
    d.config = d.status = d.events = FakeTail()  # type: ignore[assignment]
    d.ready = fake = FakeReady(out)  # type: ignore[assignment]
    d.core.fleet.upsert(worker("w1", T0, cpu=100))
    return d, out, fake


def test_a_ready_record_ends_the_wait_and_the_rest_is_taken_without_waiting() -> None:
    """``consume(500, wait)`` waited the whole tick unless 500 records came; ``poll`` returns
    on the first one and what else arrived is drained with a zero timeout."""
    d, _, fake = dispatcher()
    seen: list[Any] = []
    d._on_ready = seen.append  # type: ignore[method-assign,assignment]
    fake.records = ["r1", "r2", "r3"]
    d.read_inputs(0.02)
    assert fake.calls == [("poll", 0.02), ("consume", 499, 0)]
    assert seen == ["r1", "r2", "r3"]
    fake.calls.clear()
    d.read_inputs(0.02)  # nothing came: no second call
    assert fake.calls == [("poll", 0.02)]


def queue(d: Dispatcher, task_id: str, offset: int) -> None:
    t = ready(task_id)
    d.journal.track(t, 2)
    d.offsets.read((d.topics.ready, 2), offset)
    d.offsets.queued((d.topics.ready, 2), task_id, offset)
    d.core.enqueue(t)


def test_ready_offsets_are_committed_at_most_every_commit_interval() -> None:
    """The first tick commits; a tick within ``commit_every_ms`` leaves its last records to the
    producer (no flush, no commit); revoke and stop commit whatever the interval."""
    d, out, _ = dispatcher(commit_every_ms=60_000)
    queue(d, "a", 7)
    d.step(0)
    assert out.log[-2:] == [("delivered",), ("commit",)]
    out.log.clear()
    queue(d, "b", 8)
    d.step(0)
    assert ("produce", "p.assignments", "w1") in out.log
    assert out.log[-1] == ("produce", "p.leases", "b")  # the lease, not waited for
    assert ("commit",) not in out.log
    d._on_revoke(None, [])  # type: ignore[arg-type]
    assert out.log[-2:] == [("delivered",), ("commit",)]


def test_a_zero_interval_commits_every_tick() -> None:
    d, out, _ = dispatcher(commit_every_ms=0)
    for n, task_id in enumerate(("a", "b")):
        queue(d, task_id, 7 + n)
        d.step(0)
        assert out.log[-2:] == [("delivered",), ("commit",)]
