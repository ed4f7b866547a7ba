"""The fleet's blacklist (ADR 58): the input's faults never bench a worker, its own do, the
config record every dispatcher applies, and a lift."""

from __future__ import annotations

from datetime import timedelta

import pytest

from es_sched.blacklist import Policy
from es_sched.dispatch import config as dc
from es_sched.dispatch.core.engine import DispatchCore
from es_sched.dispatch.core.leases import LeaseTable
from es_sched.dispatch.core.placement import Fleet, Need
from es_sched.dispatch.core.queues import ReadyQueues
from tests.unit.dispatch.core.test_engine import T0, assigned, task, token, worker

pytestmark = pytest.mark.unit
POLICY = Policy(window=10, min_outcomes=5, ratio=0.5, penalty_s=300)


def fleet() -> Fleet:
    f = Fleet(blacklist_policy=POLICY)
    f.upsert(worker("m1", pool="media", types=["media.probe"]))
    return f


def test_terminal_and_retryable_failures_never_blacklist_and_the_worker_still_gets_work() -> None:
    f = fleet()
    for i in range(50):
        terminal = i % 2 == 0  # a missing source file; a flaky remote service
        decided = f.record_outcome("m1", "task.failed", T0, f"t{i}", "no file", terminal)
        assert decided is None
    # the sentinel: a normal task is still placed on that worker
    assert f.place("media", "media.probe", Need(), T0) is not None
    assert "m1" not in f.windows or not f.windows["m1"].failures()


def test_host_faults_and_expired_leases_blacklist_with_the_failures_that_caused_it() -> None:
    f = fleet()
    f.record_outcome("m1", "task.completed", T0, "ok1")
    f.record_outcome("m1", "task.completed", T0, "ok2")
    f.record_outcome("m1", "lease.expired", T0, "t1", "lease expired")
    f.record_outcome("m1", "task.failed", T0, "bad", "no file", terminal=True)  # neutral
    f.record_outcome("m1", "task.failed", T0, "t2", "GPU driver error", host_fault=True)
    decided = f.record_outcome("m1", "task.failed", T0, "t3", "disk", host_fault=True, by="d-1")
    assert decided is not None
    assert [(x.task_id, x.fault) for x in decided.failures] == [
        ("t1", "lease expired"),
        ("t2", "host fault"),
        ("t3", "host fault"),
    ]
    assert decided.why == "3 of 5 failed" and decided.pool == "media" and decided.by == "d-1"
    assert f.place("media", "media.probe", Need(), T0) is not None  # decided, not applied yet
    f.apply_blacklist(decided)
    assert f.place("media", "media.probe", Need(), T0) is None
    later = T0 + timedelta(seconds=300)
    f.workers["m1"].last_seen = later
    assert f.place("media", "media.probe", Need(), later) is not None  # the penalty ended


def test_ends_while_blacklisted_decide_nothing_new() -> None:
    f = fleet()
    for i in range(5):
        decided = f.record_outcome("m1", "lease.expired", T0, f"t{i}")
    assert decided is not None
    f.apply_blacklist(decided)
    for i in range(5):  # the late ends of tasks placed before the bench
        assert f.record_outcome("m1", "lease.expired", T0, f"late{i}") is None


def core() -> DispatchCore:
    c = DispatchCore(
        queues=ReadyQueues(), fleet=Fleet(blacklist_policy=POLICY), leases=LeaseTable(5.0, 4)
    )
    c.fleet.upsert(worker("m1"))
    return c


def test_a_record_from_another_dispatcher_applies_and_a_lift_clears_it() -> None:
    decider, other = core(), core()
    decided = None
    for i in range(5):
        decided = decider.fleet.record_outcome("m1", "lease.expired", T0, f"t{i}", "lease expired")
    assert decided is not None
    raw = dc.encode(decided.as_record())
    dc.apply(other, dc.parse("blacklist:m1", raw))  # as the config topic hands it over
    other.enqueue(task("x"))
    assert assigned(other.dispatch(T0, token)) == []
    lift = {"state": "lifted", "at": T0.isoformat(), "by": "operator"}
    dc.apply(other, dc.parse("blacklist:m1", dc.encode(lift)))
    assert assigned(other.dispatch(T0, token)) == ["x"]
    assert "m1" not in other.fleet.windows  # starts again with an empty window
