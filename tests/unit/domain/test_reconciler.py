"""The reconciler in the pure core (ADR 15): every queued worker task sets a ``requeue`` timer;
when it fires, a task still SCHEDULED and unleased is queued again (``task.requeued``), and
anything else (leased, started, ended, a superseded attempt, an ended workflow) is left alone.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from es_sched.domain import commands as c
from es_sched.domain.decide import decide
from es_sched.domain.effects import Effect, QueueTask, SetTimer, effects
from es_sched.domain.events import Event, TaskRequeued
from es_sched.domain.evolve import fold
from es_sched.domain.ids import counter_ids, timer_id
from es_sched.domain.timers import requeue_timer, timer_input
from tests.unit.domain.harness import SCRIPTS, T0, Driver, task, workflow

BOUND = 300.0
RETRY = {"name": "enc", "retryCount": 1, "retryDelaySeconds": 5, "retryLogic": "FIXED"}


def of(kind: type[Any], found: list[Effect]) -> list[Any]:
    return [fx for fx in found if isinstance(fx, kind)]


def requeue_timers(found: list[Effect]) -> list[SetTimer]:
    return [fx for fx in of(SetTimer, found) if fx.timer.kind == "requeue"]


def fire_requeue(d: Driver, task_id: str) -> list[Event]:
    """The ``timer.fired`` the timer service delivers for ``task_id``'s requeue timer, now."""
    timer = requeue_timer(d.workflow_id, task_id, d.now - timedelta(seconds=BOUND), BOUND)
    return d.send(timer_input(timer))


# -- the timer: set with every QueueTask, only when the runtime asks ------------------------
def test_a_queued_worker_task_sets_a_requeue_timer_a_bound_later() -> None:
    d = Driver(workflow(task("set", type_="SET_VARIABLE", inputParameters={"x": 1}), task("a")))
    t = d.latest("a")
    found = effects(d.st, d.events, requeue_after=BOUND)
    [timer] = requeue_timers(found)
    assert timer.timer.timer_id == timer_id("wf-1", "requeue", t.task_id)
    assert (timer.timer.task_id, timer.timer.due_at) == (t.task_id, T0 + timedelta(seconds=BOUND))
    assert of(QueueTask, found) == [QueueTask("wf-1", t.task_id, "a", "a", 1)]
    assert len(of(SetTimer, found)) == 1  # the system task SET_VARIABLE got none


def test_without_a_bound_nothing_changes() -> None:
    d = Driver(workflow(task("a")))
    assert requeue_timers(effects(d.st, d.events)) == []


def test_queueing_again_after_an_expired_lease_pushes_the_timer_back() -> None:
    d = Driver(workflow(task("a")))
    d.report("a", "STARTED")
    d.advance(40)
    t = d.latest("a")
    expired = d.send(c.ExpireLease("exp", "wf-1", task_id=t.task_id, lease_epoch=t.lease_epoch))
    [timer] = requeue_timers(effects(d.st, expired, requeue_after=BOUND))
    assert timer.timer.timer_id == timer_id("wf-1", "requeue", t.task_id)  # replaces the first
    assert timer.timer.due_at == T0 + timedelta(seconds=40 + BOUND)


# -- the fire: requeued only while SCHEDULED and unleased -----------------------------------
def test_a_task_still_waiting_unleased_is_requeued_with_a_fresh_ready_record_and_timer() -> None:
    d = Driver(workflow(task("a")))
    t = d.latest("a")
    d.advance(BOUND)
    events = fire_requeue(d, t.task_id)
    assert [e.payload for e in events] == [TaskRequeued(t.task_id, 1)]
    found = effects(d.st, events, requeue_after=BOUND)
    assert of(QueueTask, found) == [QueueTask("wf-1", t.task_id, "a", "a", 1, requeue=True)]
    [timer] = requeue_timers(found)
    assert timer.timer.due_at == d.now + timedelta(seconds=BOUND)
    # the task is exactly as it was: nothing but the history knows it was requeued
    assert d.latest("a") == t
    d.report("a")
    assert d.st.status == "COMPLETED"


def test_a_task_whose_lease_expired_and_was_never_queued_again_is_requeued() -> None:
    d = Driver(workflow(task("a")))
    d.report("a", "STARTED")
    t = d.latest("a")
    d.send(c.ExpireLease("exp", "wf-1", task_id=t.task_id, lease_epoch=t.lease_epoch))
    d.advance(BOUND)
    assert d.types(fire_requeue(d, t.task_id)) == ["task.requeued"]


def test_a_leased_task_is_left_alone() -> None:
    d = Driver(workflow(task("a")))
    t = d.latest("a")
    d.send(
        c.DispatchTask(
            "lease",
            "wf-1",
            task_id=t.task_id,
            attempt=1,
            worker_id="w1",
            lease_epoch=1,
            lease_token="tok",
        )
    )
    assert d.latest("a").status == "SCHEDULED"  # leased, not started yet
    d.advance(BOUND)
    assert fire_requeue(d, t.task_id) == []


def test_a_started_task_is_left_alone() -> None:
    d = Driver(workflow(task("a")))
    d.report("a", "STARTED")
    d.advance(BOUND)
    assert fire_requeue(d, d.latest("a").task_id) == []


def test_an_ended_task_is_left_alone() -> None:
    d = Driver(workflow(task("a"), task("b")))
    first = d.latest("a").task_id
    d.report("a")
    d.advance(BOUND)
    assert fire_requeue(d, first) == []


def test_a_superseded_attempt_is_left_alone() -> None:
    d = Driver(workflow(task("enc", name="enc")), taskdefs=[RETRY])
    first = d.latest("enc").task_id
    d.report("enc", "FAILED", reason="crash")
    d.advance(5)
    d.fire("retry", "enc")
    assert d.latest("enc").attempt == 2 and d.latest("enc").status == "SCHEDULED"
    d.advance(BOUND)
    assert fire_requeue(d, first) == []  # only the new attempt's own timer may requeue it
    assert d.types(fire_requeue(d, d.latest("enc").task_id)) == ["task.requeued"]


def test_a_task_of_an_ended_workflow_is_left_alone() -> None:
    d = Driver(workflow(task("a")))
    t = d.latest("a")
    d.send(c.CancelWorkflow("cancel", "wf-1", reason="no longer needed"))
    assert d.st.status == "CANCELED"
    d.advance(BOUND)
    assert fire_requeue(d, t.task_id) == []


def test_a_system_task_is_never_requeued_even_by_a_forged_fire() -> None:
    # system tasks never wait SCHEDULED: they end in their decision or wait IN_PROGRESS
    d = Driver(workflow(task("hold", type_="WAIT")))
    d.advance(BOUND)
    assert fire_requeue(d, d.latest("hold").task_id) == []


def test_a_redelivered_fire_requeues_once_and_replay_reproduces_the_decision() -> None:
    d = Driver(workflow(task("a")))
    t = d.latest("a")
    d.advance(BOUND)
    timer = requeue_timer("wf-1", t.task_id, T0, BOUND)
    assert d.types(d.send(timer_input(timer))) == ["task.requeued"]
    assert d.send(timer_input(timer)) == []  # the same input id: already applied
    # I5: deciding the recorded inputs again gives the recorded events
    ids = counter_ids("t")
    start = c.StartWorkflow("start-1", "wf-1", name="wf", definition=workflow(task("a")))
    replayed = decide(None, start, T0, ids, SCRIPTS)
    state = fold(replayed)
    again = decide(state, timer_input(timer), d.now, ids, SCRIPTS)
    assert [*replayed, *again] == d.events
