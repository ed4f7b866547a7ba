"""Fair share between tenants within a level, and tenants' concurrency quotas (ADR 68)."""

from __future__ import annotations

import itertools
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from es_sched.dispatch import config as dispatch_config
from es_sched.dispatch.core.engine import Assignment, DispatchCore, Preemption
from es_sched.dispatch.core.fairshare import FairShare, Level
from es_sched.dispatch.core.limits import Limits
from es_sched.dispatch.core.placement import WorkerView
from es_sched.dispatch.core.queues import ReadyTask
from es_sched.errors import SchemaError

pytestmark = pytest.mark.unit
T0 = datetime(2026, 5, 1, 9, 0, tzinfo=UTC)
tokens = (f"tok-{i}" for i in itertools.count())


def token() -> str:
    return next(tokens)


def task(tid: str, tenant: str | None, started: float, **kw: Any) -> ReadyTask:
    at = T0 + timedelta(seconds=started)
    return ReadyTask(
        tid, f"wf-{tid}", kw.pop("task_type", "encode"), 4, at, at, tenant=tenant, **kw
    )


def core_with(slots: int, **kw: Any) -> DispatchCore:
    core = DispatchCore(**kw)
    core.fleet.upsert(
        WorkerView("w1", "default", "1.0", frozenset({"encode"}), 64, 64_000, slots=slots)
    )
    return core


def at(core: DispatchCore, seconds: float) -> datetime:
    now = T0 + timedelta(seconds=seconds)
    for w in core.fleet.workers.values():
        w.last_seen = now
    return now


def started(decisions: list[Assignment | Preemption]) -> list[Assignment]:
    return [d for d in decisions if isinstance(d, Assignment)]


def run_one_at_a_time(core: DispatchCore, n: int) -> list[str | None]:
    """Start and finish ``n`` tasks one by one on a one-slot worker: the tenants in order."""
    order: list[str | None] = []
    for i in range(n):
        now = at(core, 1000 + i)
        (a,) = started(core.dispatch(now, token))
        order.append(a.task.tenant)
        core.finished(a.task.task_id)
    return order


def a_backlog_then_b(core: DispatchCore, a: int = 200, b: int = 10) -> None:
    for i in range(a):
        core.enqueue(task(f"a{i}", "A", i / 100))
    for i in range(b):
        core.enqueue(task(f"b{i}", "B", 100 + i / 100))  # B's workflows started later


def test_a_tenant_arriving_behind_a_backlog_gets_every_other_start() -> None:
    core = core_with(slots=1)
    a_backlog_then_b(core)
    order = run_one_at_a_time(core, 30)
    assert order[:20].count("B") == 10  # B's 10 within its half of the first 20 starts
    assert order[20:] == ["A"] * 10


def test_off_the_level_keeps_its_old_order_and_b_waits_behind_a() -> None:
    core = core_with(slots=1, fair=FairShare(enabled=False))
    a_backlog_then_b(core)
    assert run_one_at_a_time(core, 200) == ["A"] * 200


def test_weights_share_starts_in_proportion() -> None:
    core = core_with(slots=1)
    dispatch_config.apply(core, dispatch_config.parse("tenant:A", b'{"weight": 3}'))
    for i in range(300):
        core.enqueue(task(f"a{i}", "A", i / 1000))
        core.enqueue(task(f"b{i}", "B", i / 1000))
    counts = Counter(run_one_at_a_time(core, 200))
    assert counts == {"A": 150, "B": 50}


def test_an_idle_tenant_banks_no_credit() -> None:
    """B ran nothing while A ran 50 tasks alone: when B comes, they alternate from there on,
    B does not get 50 starts in a row."""
    core = core_with(slots=1)
    for i in range(100):
        core.enqueue(task(f"a{i}", "A", i / 1000))
    assert run_one_at_a_time(core, 50) == ["A"] * 50
    for i in range(20):
        core.enqueue(task(f"b{i}", "B", 50 + i / 1000))
    order = run_one_at_a_time(core, 10)
    assert order.count("B") == 5 and order.count("A") == 5


def test_a_tenant_at_its_quota_waits_while_another_tenant_starts() -> None:
    core = core_with(slots=10)
    dispatch_config.apply(core, dispatch_config.parse("tenant:A", b'{"quota": 2}'))
    for i in range(5):
        core.enqueue(task(f"a{i}", "A", i))  # A's are older: first in the old order too
    for i in range(3):
        core.enqueue(task(f"b{i}", "B", 10 + i))
    first = started(core.dispatch(at(core, 20), token))
    assert Counter(a.task.tenant for a in first) == {"A": 2, "B": 3}  # no head-of-line block
    assert core.limits.refused.get("tenant_quota", 0) == 0  # skipped, never tried
    assert started(core.dispatch(at(core, 21), token)) == []  # A still holds its 2
    core.finished(next(a.task.task_id for a in first if a.task.tenant == "A"))
    (again,) = started(core.dispatch(at(core, 22), token))
    assert again.task.tenant == "A"
    assert core.limits.tenant_in_flight["A"] == 2


def test_the_quota_is_dealt_to_ready_partitions_like_tenant_rates() -> None:
    limits = Limits()
    limits.set_quota("A", 10)
    limits.own(frozenset({0, 1}), 4, T0)  # half the partitions: half the quota
    assert limits.quota("A") == 5
    shares = []
    for owned in ({0}, {1}, {2}, {3}):
        other = Limits()
        other.set_quota("A", 10)
        other.own(frozenset(owned), 4, T0)
        shares.append(other.quota("A"))
    assert sum(s or 0 for s in shares) == 10  # the cores together hold the quota, no more
    for _ in range(5):
        assert limits.admit("encode", "A", T0) is None
    assert limits.admit("encode", "A", T0) == "tenant_quota"
    limits.finished("encode", "A")
    assert limits.admit("encode", "A", T0) is None


def test_a_level_merges_tenants_in_the_old_order_without_a_tenant_order() -> None:
    level = Level()
    entries = [(1, float(i), i, task(f"t{i}", tenant, i)) for i, tenant in enumerate("ABAB")]
    for entry in reversed(entries):
        level.push(entry)
    assert [level.pop()[3].task_id for _ in range(4)] == ["t0", "t1", "t2", "t3"]  # type: ignore[index]
    assert level.pop() is None and len(level) == 0


def test_a_tenant_record_is_validated() -> None:
    change = dispatch_config.parse("tenant:acme", b'{"weight": 2.5, "quota": 40}')
    assert change.value == {"weight": 2.5, "quota": 40}
    for bad in (b'{"weight": 0}', b'{"quota": -1}', b'{"share": 1}'):
        with pytest.raises(SchemaError, match="tenant:acme"):
            dispatch_config.parse("tenant:acme", bad)
    core = DispatchCore()
    dispatch_config.apply(core, change)
    assert core.fair.weight("acme") == 2.5 and core.limits.quotas == {"acme": 40}
    dispatch_config.apply(core, dispatch_config.parse("tenant:acme", None))  # tombstone
    assert core.fair.weight("acme") == 1.0 and core.limits.quotas == {}


def two_types(slots: int) -> DispatchCore:
    core = DispatchCore()
    core.fleet.upsert(
        WorkerView("w1", "default", "1.0", frozenset({"x", "y"}), 64, 64_000, slots=slots)
    )
    return core


def test_tenants_share_a_pool_across_types_within_one_pass() -> None:
    """One dispatch call starting many: each start moves the pool's tags, and the next pick
    across both types sees it."""
    core = two_types(slots=8)
    for i in range(20):
        core.enqueue(task(f"ax{i}", "A", i / 100, task_type="x"))
        core.enqueue(task(f"ay{i}", "A", i / 100, task_type="y"))
    for i in range(4):
        core.enqueue(task(f"bx{i}", "B", 10 + i, task_type="x"))
    starts = started(core.dispatch(at(core, 20), token))
    assert Counter(a.task.tenant for a in starts) == {"A": 4, "B": 4}


def test_a_quota_holds_within_one_pass_across_types() -> None:
    core = two_types(slots=10)
    dispatch_config.apply(core, dispatch_config.parse("tenant:A", b'{"quota": 3}'))
    for i in range(5):
        core.enqueue(task(f"ax{i}", "A", i, task_type="x"))
        core.enqueue(task(f"ay{i}", "A", i, task_type="y"))
    core.enqueue(task("b", "B", 50, task_type="y"))
    starts = started(core.dispatch(at(core, 60), token))
    assert Counter(a.task.tenant for a in starts) == {"A": 3, "B": 1}
