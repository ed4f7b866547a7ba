"""SLA tiers in the dispatcher's core (ADR 67): tier and slack decide a task's level, a tier's
reserved share of a pool holds, preemption respects tiers; the ready record carries the SLA."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from es_sched.dispatch import records
from es_sched.dispatch.core.engine import DispatchCore, Preemption
from es_sched.dispatch.core.queues import ReadyQueues
from es_sched.dispatch.core.urgency import Urgency
from es_sched.domain import sla
from es_sched.serialization.records import encode_ready
from tests.unit.dispatch.core.test_engine import T0, assigned, at, core_with, task, token, worker

DEADLINE = T0 + timedelta(seconds=30)


def sla_core(*workers: Any, escalate_s: float = 60.0, **kw: Any) -> DispatchCore:
    return core_with(*workers, queues=ReadyQueues(60.0, Urgency(escalate_s, 1.0)), **kw)


def test_a_p0_with_a_deadline_goes_before_a_p3_backlog_queued_earlier() -> None:
    core = sla_core(worker("w1", slots=1))
    for i in range(50):
        core.enqueue(task(f"bulk-{i}", wf=f"b{i}", sla_tier="P3", at=i, started=i))
    core.enqueue(task("urgent", wf="u", sla_tier="P0", deadline=DEADLINE, at=60, started=60))
    assert assigned(core.dispatch(at(core, 61), token)) == ["urgent"]
    core.finished("urgent")
    assert assigned(core.dispatch(at(core, 62), token)) == ["bulk-0"]


def test_without_tiers_the_same_load_goes_in_start_order() -> None:
    core = core_with(worker("w1", slots=1))
    for i in range(50):
        core.enqueue(task(f"bulk-{i}", wf=f"b{i}", at=i, started=i))
    core.enqueue(task("urgent", wf="u", at=60, started=60))
    assert assigned(core.dispatch(at(core, 61), token)) == ["bulk-0"]


def test_a_task_escalates_within_its_band_as_its_slack_shrinks() -> None:
    """Two P3 tasks at priority 8; the later one has a deadline. While its slack is ample the
    earlier workflow goes first; once its slack runs short it has dropped to level 6 and
    goes first."""
    queues = ReadyQueues(0.0, Urgency(escalate_s=20.0, typical_s=5.0))
    early = task("early", priority=8, wf="e", sla_tier="P3", started=0)
    late = task("late", priority=8, wf="l", sla_tier="P3", deadline=DEADLINE, started=1, at=1)
    queues.push(early)
    queues.push(late)
    q = queues.by_type["encode"]
    assert late.remaining_s == 5.0 and q.urgent == {"late": (8, late)}
    queues.escalate(T0 + timedelta(seconds=2))  # slack 23 s: nothing moves
    peek = q.peek(T0 + timedelta(seconds=2))
    assert peek is not None and peek.task_id == "early"
    assert queues.escalate(T0 + timedelta(seconds=10)) == 1  # slack 15 s: one step down
    assert q.urgent == {"late": (7, late)}
    peek = q.peek(T0 + timedelta(seconds=10))
    assert peek is not None and peek.task_id == "late"
    queues.escalate(T0 + timedelta(seconds=40))  # past its deadline: the floor of P3's band
    assert q.urgent == {"late": (6, late)}
    popped = q.pop(T0 + timedelta(seconds=40))
    assert popped is late and q.urgent == {}


def test_the_remaining_path_uses_learned_run_times_where_there_are_some() -> None:
    learned = {("enc", "any"): 8.0, ("pack", "any"): 3.0}
    urgency = Urgency(60.0, typical_s=2.0, learned=lambda t, c: learned.get((t, c)))
    assert urgency.remaining_s("enc", {}, {}, ("pack", "qc", "pack")) == 8.0 + 3.0 + 2.0 + 3.0
    later = T0 + timedelta(seconds=100)
    slack = sla.slack_s(later, T0, 16.0)  # 84 s: ample
    assert urgency.level(4, "P0", later, 16.0, T0) == sla.level(4, "P0", slack, 60.0) == 1
    assert urgency.level(4, "P0", later, 16.0, T0 + timedelta(seconds=30)) == 0  # 54 s


def test_a_p0_reserve_keeps_a_fifth_of_the_pool_from_p3() -> None:
    core = sla_core(
        *[worker(f"w{i}", slots=1) for i in range(5)], tiers=sla.TierPolicy({"P0": 0.2})
    )
    for i in range(10):
        core.enqueue(task(f"bulk-{i}", wf=f"b{i}", sla_tier="P3", started=i))
    now = at(core, 1)
    assert len(assigned(core.dispatch(now, token))) == 4  # the fifth slot stays free
    core.enqueue(task("urgent", wf="u", sla_tier="P0", deadline=DEADLINE, started=2, at=2))
    assert assigned(core.dispatch(at(core, 2), token)) == ["urgent"]


def test_tierless_tasks_are_not_held_back_by_a_reserve() -> None:
    core = sla_core(
        *[worker(f"w{i}", slots=1) for i in range(5)], tiers=sla.TierPolicy({"P0": 0.2})
    )
    for i in range(10):
        core.enqueue(task(f"t-{i}", wf=f"b{i}", started=i))
    assert len(assigned(core.dispatch(at(core, 1), token))) == 5


def preempting(victim_tier: str | None, urgent_tier: str | None, urgent_priority: int = 4) -> bool:
    core = sla_core(worker("w1", cpu=2), preempt_after_s=60)
    core.enqueue(task("running", priority=7, sla_tier=victim_tier, resources={"cpu": 2}))
    assert assigned(core.dispatch(T0, token)) == ["running"]
    core.enqueue(
        task(
            "urgent",
            priority=urgent_priority,
            wf="u",
            sla_tier=urgent_tier,
            started=100,
            at=100,
            resources={"cpu": 2},
        )
    )
    decisions = core.dispatch(at(core, 61), token)
    return any(isinstance(d, Preemption) and d.victim.task_id == "running" for d in decisions)


def test_a_p0_preempts_a_p3_and_a_p3_never_preempts_a_higher_tier() -> None:
    assert preempting("P3", "P0")
    assert preempting("P2", "P0")
    assert not preempting("P1", "P0")
    for higher in ("P0", "P1", "P2"):
        assert not preempting(higher, "P3", urgent_priority=0)
    assert preempting(None, None, urgent_priority=0)  # tierless: priority as before
    assert not preempting("P2", None, urgent_priority=0)  # a tierless task spares a P2


def ready(task_id: str, **kw: Any) -> bytes:
    return encode_ready(
        workflow_id="wf",
        task_id=task_id,
        ref="a",
        name="enc",
        attempt=1,
        input={},
        priority=4,
        resources={},
        rate_limit_key=None,
        tenant=None,
        callback=False,
        workflow_started_at=T0,
        **kw,
    )


def test_the_ready_record_carries_the_sla_to_the_queue_and_the_journal() -> None:
    doc = {"tier": "P0", "deadline": "2026-05-01T09:00:30Z", "after": ["pack"]}
    t = records.ready_task(ready("t1", sla=doc), T0, T0)
    assert (t.sla_tier, t.deadline, t.after) == ("P0", DEADLINE, ("pack",))
    assert b"sla" not in ready("t2")  # a record without an SLA stays as it was
    journaled = records.journaled(records.journal_record(t, 1), 0)
    assert journaled.task.sla_tier == "P0" and journaled.task.deadline == DEADLINE


def test_a_tiers_breaker_holds_its_tasks_of_a_failing_type_and_only_those() -> None:
    learned = {"encode": (0.8, 20), "pack": (0.8, 5)}  # pack: too few outcomes to judge
    core = sla_core(
        worker("w1", slots=8, types=["encode", "pack"]),
        tiers=sla.TierPolicy({}, {"P3": 0.5}),
        failures=learned.get,
    )
    core.enqueue(task("bulk", wf="b", sla_tier="P3"))
    core.enqueue(task("bulk-pack", wf="bp", sla_tier="P3", task_type="pack"))
    core.enqueue(task("plain", wf="p", started=1))
    core.enqueue(task("urgent", wf="u", sla_tier="P0", started=2))
    assert sorted(assigned(core.dispatch(at(core, 1), token))) == ["bulk-pack", "plain", "urgent"]
    learned["encode"] = (0.4, 20)  # the type recovered
    assert assigned(core.dispatch(at(core, 2), token)) == ["bulk"]
