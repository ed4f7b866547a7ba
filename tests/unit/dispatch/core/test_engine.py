"""The dispatcher's pure core: order, limits, placement, leases, protection, preemption."""

from __future__ import annotations

import itertools
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from es_sched.dispatch.core.engine import Assignment, DispatchCore, Preemption
from es_sched.dispatch.core.leases import LeaseTable
from es_sched.dispatch.core.limits import Rate
from es_sched.dispatch.core.placement import Gpu, Need, WorkerView
from es_sched.dispatch.core.queues import ReadyTask
from es_sched.errors import ConfigError

T0 = datetime(2026, 5, 1, 9, 0, tzinfo=UTC)
tokens = (f"tok-{i}" for i in itertools.count())


def token() -> str:
    return next(tokens)


def task(
    tid: str, priority: int = 4, wf: str = "wf", started: float = 0, at: float = 0, **kw: Any
) -> ReadyTask:
    return ReadyTask(
        tid,
        wf,
        kw.pop("task_type", "encode"),
        priority,
        T0 + timedelta(seconds=at),
        T0 + timedelta(seconds=started),
        **kw,
    )


def worker(
    wid: str, cpu: float = 8, memory_mb: int = 16_000, gpus: list[Gpu] | None = None, **kw: Any
) -> WorkerView:
    pool, version = kw.pop("pool", "default"), kw.pop("version", "1.0")
    types = frozenset(kw.pop("types", ["encode"]))
    return WorkerView(wid, pool, version, types, cpu, memory_mb, gpus or [], last_seen=T0, **kw)


def assigned(decisions: list[Assignment | Preemption]) -> list[str]:
    return [d.task.task_id for d in decisions if isinstance(d, Assignment)]


def at(core: DispatchCore, seconds: float) -> datetime:
    """A moment at which every worker has just sent its status (alive)."""
    now = T0 + timedelta(seconds=seconds)
    for w in core.fleet.workers.values():
        w.last_seen = now
    return now


def core_with(*workers: WorkerView, **kw: Any) -> DispatchCore:
    core = DispatchCore(**kw)
    for w in workers:
        core.fleet.upsert(w)
    return core


def test_priority_zero_goes_before_500_queued_priority_eight_tasks() -> None:
    core = core_with(worker("w1", cpu=1))
    for i in range(500):
        core.enqueue(
            task(
                f"low{i}",
                priority=8,
                wf=f"wf{i}",
                started=i / 1000,
                at=i / 1000,
                resources={"cpu": 1},
            )
        )
    # queued within half a second, then the urgent one arrives: it goes first
    core.enqueue(task("urgent", priority=0, wf="late", started=1, at=1, resources={"cpu": 1}))
    assert assigned(core.dispatch(at(core, 1), token)) == ["urgent"]


def test_fifo_within_a_level_and_downstream_before_a_newer_workflows_upstream() -> None:
    core = core_with(worker("w1", cpu=100))
    core.enqueue(task("a-1", wf="A", started=0, at=0))
    core.enqueue(task("b-1", wf="B", started=5, at=5))
    core.enqueue(task("c-1", wf="C", started=6, at=6))
    core.enqueue(task("a-2", wf="A", started=0, at=10))  # downstream of A, arrives last
    assert assigned(core.dispatch(at(core, 10), token)) == [
        "a-1",
        "a-2",
        "b-1",
        "c-1",
    ]


def test_aging_lifts_a_long_waiting_task_over_newer_higher_priority_ones() -> None:
    core = (
        core_with(worker("w1", cpu=1), queues_aging=None)
        if False
        else core_with(worker("w1", cpu=1))
    )
    core.queues.aging_s = 10.0
    core.enqueue(task("old-p5", priority=5, wf="A", at=0, resources={"cpu": 1}))
    core.enqueue(task("new-p2", priority=2, wf="B", started=100, at=100, resources={"cpu": 1}))
    # at t=100 the p5 task has waited 100 s: effective level 5 - 10 < 0 -> it goes first
    assert assigned(core.dispatch(at(core, 100), token)) == ["old-p5"]


def test_a_rate_limit_is_never_exceeded_in_any_one_second_window() -> None:
    core = core_with(worker("w1", cpu=10_000))
    core.limits.set_rate(("type", "encode"), Rate.per_second(5, burst=5))
    for i in range(200):
        core.enqueue(task(f"t{i}", wf=f"wf{i}", started=i, at=0))
    sent: list[float] = []
    for step in range(100):  # ten seconds in 100 ms steps
        now = at(core, step / 10)
        for d in core.dispatch(now, token):
            assert isinstance(d, Assignment)
            sent.append((now - T0).total_seconds())
            core.finished(d.task.task_id)
    windows = Counter(int(s * 10) for s in sent)
    for start in range(0, 100):
        in_window = sum(windows.get(start + j, 0) for j in range(10))
        assert in_window <= 5 + 1e-9 + 5  # burst of 5 plus 5 per second refill, worst window
    assert 50 <= len(sent) <= 55  # 5 burst + 5/s over ~10 s
    assert core.limits.refused["type_rate"] > 0


def test_concurrency_limit_and_tenant_rate() -> None:
    core = core_with(worker("w1", cpu=100))
    core.limits.set_concurrency("encode", 2)
    for i in range(5):
        core.enqueue(task(f"t{i}", wf=f"wf{i}", started=i))
    first = assigned(core.dispatch(T0, token))
    assert len(first) == 2
    core.finished(first[0])
    assert len(assigned(core.dispatch(T0, token))) == 1
    core.limits.set_concurrency("encode", None)
    core.limits.set_rate(("tenant", "news"), Rate.per_second(1, burst=1))
    core.enqueue(task("n1", tenant="news", wf="x", started=50))
    core.enqueue(task("n2", tenant="news", wf="y", started=51))
    got = assigned(core.dispatch(at(core, 60), token))
    assert "n1" in got and "n2" not in got


def test_gpu_task_needing_4_gib_never_lands_on_a_worker_with_less_free() -> None:
    small = worker("small", gpus=[Gpu(0, 8192, 3000)], types=["encode_gpu"])
    big = worker("big", gpus=[Gpu(0, 8192, 1000), Gpu(1, 16384, 12000)], types=["encode_gpu"])
    core = core_with(small, big)
    for i in range(4):
        core.enqueue(
            task(
                f"g{i}",
                task_type="encode_gpu",
                wf=f"w{i}",
                started=i,
                resources={"gpu_memory_mb": 4096},
            )
        )
    decisions = [d for d in core.dispatch(T0, token) if isinstance(d, Assignment)]
    assert [(d.placement.worker_id, d.placement.gpu) for d in decisions] == [("big", 1), ("big", 1)]
    # 12000 free: two 4 GiB tasks fit, a third does not; "small" never qualifies
    assert core.queues.by_type["encode_gpu"].size == 2


def test_no_overcommit_and_binpack_versus_spread() -> None:
    core = core_with(worker("w8", cpu=8), worker("w4", cpu=4))
    for i in range(10):
        core.enqueue(task(f"t{i}", wf=f"wf{i}", started=i, resources={"cpu": 2, "memory_mb": 1000}))
    decisions = [d for d in core.dispatch(T0, token) if isinstance(d, Assignment)]
    assert len(decisions) == 6  # 8/2 + 4/2: never more
    assert decisions[0].placement.worker_id == "w4"  # binpack fills the tightest first
    spread = core_with(worker("w8", cpu=8), worker("w4", cpu=4))
    spread.policies["default"] = "spread"
    spread.enqueue(task("s", resources={"cpu": 2}))
    assert [
        d.placement.worker_id for d in spread.dispatch(T0, token) if isinstance(d, Assignment)
    ] == ["w8"]


def test_a_worker_gets_no_more_tasks_than_its_slots_even_without_declared_needs() -> None:
    core = core_with(worker("w", slots=2))
    for i in range(4):
        core.enqueue(task(f"t{i}", wf=f"wf{i}", started=i))
    assert assigned(core.dispatch(T0, token)) == ["t0", "t1"]
    core.finished("t0")
    assert assigned(core.dispatch(T0, token)) == ["t2"]


def test_use_reported_for_another_dispatchers_tasks_is_not_offered_again() -> None:
    core = core_with(worker("w", cpu=4, memory_mb=4000, slots=8))
    core.enqueue(task("mine", resources={"cpu": 1, "memory_mb": 500}))
    assert assigned(core.dispatch(T0, token)) == ["mine"]
    # The worker holds ours and two 1-cpu tasks another dispatcher placed: 1 cpu is left.
    core.observe("w", {"mine", "x1", "x2"}, Need(cpu=3, memory_mb=1500))
    w = core.fleet.workers["w"]
    assert (w.foreign, w.foreign_slots) == (Need(cpu=2, memory_mb=1000), 2)
    for i in range(3):
        core.enqueue(task(f"n{i}", wf=f"wf{i}", started=i, resources={"cpu": 1}))
    assert assigned(core.dispatch(T0, token)) == ["n0"]
    # Theirs ended; a report that lags behind our own placements never goes negative.
    core.observe("w", {"mine"}, Need(cpu=0))
    assert core.fleet.workers["w"].foreign == Need()
    assert assigned(core.dispatch(T0, token)) == ["n1", "n2"]
    assert core.fleet.workers["w"].free_cpu == -1 + 1  # 4 cpu: mine, n0, n1, n2


def test_expired_lease_goes_back_to_the_head_and_dead_workers_are_reclaimed() -> None:
    core = core_with(worker("w1", cpu=1), leases=LeaseTable(heartbeat_s=5, k=3))
    core.enqueue(task("t1", resources={"cpu": 1}))
    core.enqueue(task("t2", wf="b", started=10, resources={"cpu": 1}))
    [first] = core.dispatch(T0, token)
    assert isinstance(first, Assignment) and first.lease.epoch == 1
    core.leases.heartbeat("w1", T0 + timedelta(seconds=10))
    assert core.expire(T0 + timedelta(seconds=20)) == []  # extended to t=25
    gone = core.expire(T0 + timedelta(seconds=25))
    assert [lease.task_id for lease in gone] == ["t1"]
    [again] = core.dispatch(at(core, 25), token)
    assert isinstance(again, Assignment) and again.task.task_id == "t1" and again.lease.epoch == 2
    core.fleet.workers["w1"].last_seen = T0  # silent since: dead after 60 s
    reclaimed = core.expire(T0 + timedelta(seconds=90))
    assert [lease.task_id for lease in reclaimed] == ["t1"]
    assert core.queues.by_type["encode"].size == 2
    # ADR 71: the death is declared once per silence, with the leases it took back.
    [death] = core.take_deaths()
    assert (death.worker_id, death.pool, death.last_seen, death.reclaimed) == (
        "w1",
        "default",
        T0,
        ("t1",),
    )
    core.expire(T0 + timedelta(seconds=95))
    assert core.take_deaths() == []  # still the same silence
    core.fleet.workers["w1"].last_seen = T0 + timedelta(seconds=100)  # back, then silent again
    core.expire(T0 + timedelta(seconds=170))
    [second] = core.take_deaths()
    assert second.last_seen == T0 + timedelta(seconds=100) and second.reclaimed == ()


def test_a_worker_never_heard_from_is_not_declared_dead() -> None:
    core = core_with(worker("w1", cpu=1))
    core.fleet.workers["w1"].last_seen = None
    core.expire(T0 + timedelta(seconds=600))
    assert core.take_deaths() == []


def test_banned_versions_blacklisted_and_suspect_workers_get_nothing() -> None:
    core = core_with(worker("old", version="0.9"), worker("flaky"), worker("quiet"))
    core.fleet.banned_versions.add("0.9")
    for i in range(10):
        decided = core.fleet.record_outcome("flaky", "lease.expired", T0, f"x{i}")
        if decided is not None:
            core.fleet.apply_blacklist(decided)
    core.fleet.workers["quiet"].last_seen = T0 - timedelta(seconds=30)  # suspect
    core.enqueue(task("t"))
    assert core.dispatch(T0, token) == []
    core.fleet.banned_versions.clear()
    assert [
        d.placement.worker_id for d in core.dispatch(T0, token) if isinstance(d, Assignment)
    ] == ["old"]


def test_preemption_requeues_a_long_running_low_priority_task_at_the_head() -> None:
    core = core_with(worker("w1", cpu=2), preempt_after_s=60)
    core.enqueue(task("batch", priority=7, resources={"cpu": 2}))
    assert assigned(core.dispatch(T0, token)) == ["batch"]
    core.enqueue(task("live", priority=0, wf="live", started=100, at=100, resources={"cpu": 2}))
    assert core.dispatch(at(core, 30), token) == []  # not running long enough yet
    decisions = core.dispatch(at(core, 61), token)
    assert [type(d).__name__ for d in decisions] == ["Preemption", "Assignment"]
    assert isinstance(decisions[0], Preemption) and decisions[0].victim.task_id == "batch"
    assert assigned(decisions) == ["live"]
    head = core.queues.by_type["encode"].peek(T0 + timedelta(seconds=61))
    assert head is not None and head.task_id == "batch" and head.attempt == 1
    core.finished("live")
    assert assigned(core.dispatch(at(core, 62), token)) == ["batch"]


def test_lease_multiple_must_be_three_to_six() -> None:
    with pytest.raises(ConfigError, match=r"3\.\.6"):
        LeaseTable(k=2)


def test_need_of_declared_resources() -> None:
    assert Need.of(
        {"cpu": 2, "memory_mb": 512, "gpu_memory_mb": 4096, "custom": {"video_seconds": 8}}
    ) == Need(2.0, 512, 4096, (("video_seconds", 8.0),))


def test_a_lease_the_decider_ended_goes_back_to_the_head_only_for_its_epoch() -> None:
    """A worker declined its lease (ADR 24 a): the decider's task.lease_expired names the
    epoch; the dispatcher queues the task again at once, and ignores an older epoch's."""
    core = core_with(worker("w1", cpu=1), leases=LeaseTable(heartbeat_s=5, k=3))
    core.enqueue(task("t1", resources={"cpu": 1}))
    [first] = core.dispatch(T0, token)
    assert isinstance(first, Assignment) and first.lease.epoch == 1
    assert core.given_back("t1", 0) is None and "t1" in core.in_flight  # not this lease
    given = core.given_back("t1", 1)
    assert given is not None and given.worker_id == "w1"
    assert "t1" not in core.in_flight and core.leases.leases == {}
    [again] = core.dispatch(at(core, 1), token)  # the worker's cpu is free again
    assert isinstance(again, Assignment) and again.task.task_id == "t1" and again.lease.epoch == 2
    assert core.given_back("t1", 1) is None and "t1" in core.in_flight
