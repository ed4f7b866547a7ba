"""Bounded decider state (ADR 18): the retention decision and what a retired workflow answers.

Pure: the time is passed in. The shell side (``runtime.retirement``) is checked with a state
held in plain dicts: it picks only what the core calls due, leaves what the batch touched, puts
its picks back when the batch aborts, and packs markers without losing them.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from es_sched.domain import commands as c
from es_sched.domain.events import WorkflowRejected
from es_sched.domain.retention import Ended, answer_ended, due, forget_at, marker
from es_sched.domain.state import WorkflowState
from es_sched.kafka.topics import Topics
from es_sched.runtime.decider_states import KeptStates
from es_sched.runtime.retirement import EndedIndex, Retirement
from es_sched.serialization.changelog import Resting, decode_ended, ended_key
from tests.unit.domain.harness import Driver, task, workflow

RETAIN = 60.0


def ended_driver(fail: bool = False) -> Driver:
    d = Driver(workflow(task("a")))
    d.advance(5)
    d.report("a", "TERMINAL" if fail else "COMPLETED")
    assert d.st.terminal
    return d


def test_a_running_workflow_is_never_due() -> None:
    d = Driver(workflow(task("a")))
    assert forget_at(d.st, RETAIN) is None
    assert not due(d.st, d.now + timedelta(days=365), RETAIN)


def test_an_ended_workflow_is_due_retain_seconds_after_it_ended() -> None:
    d = ended_driver()
    assert d.st.ended_at is not None
    assert forget_at(d.st, RETAIN) == d.st.ended_at + timedelta(seconds=RETAIN)
    assert not due(d.st, d.st.ended_at + timedelta(seconds=RETAIN - 1), RETAIN)
    assert due(d.st, d.st.ended_at + timedelta(seconds=RETAIN), RETAIN)


def test_a_retried_workflow_is_live_again_and_not_due() -> None:
    d = ended_driver(fail=True)
    d.send(c.RetryWorkflow("retry-1", d.workflow_id))
    assert not d.st.terminal
    assert not due(d.st, d.now + timedelta(days=1), RETAIN)


def test_a_duplicate_start_of_a_retired_workflow_starts_nothing() -> None:
    gone = marker(ended_driver().st)
    start = c.StartWorkflow("start-1", gone.workflow_id, name="wf", definition=workflow(task("a")))
    assert answer_ended(gone, start, ended_driver().now) == []


def test_a_late_cancel_is_refused_outside_the_history_naming_the_end() -> None:
    d = ended_driver()
    gone = marker(d.st)
    [event] = answer_ended(gone, c.CancelWorkflow("cancel-9", gone.workflow_id), d.now)
    assert isinstance(event.payload, WorkflowRejected)
    assert event.seq == 0  # outside any history (ADR 11): the history's seq does not move
    assert event.payload.command_id == "cancel-9"
    assert f"ended COMPLETED at seq {d.st.seq}" in event.payload.reason


def test_late_runtime_inputs_for_a_retired_workflow_are_no_ops() -> None:
    d = ended_driver()
    gone = marker(d.st)
    t = d.latest("a")
    base: dict[str, Any] = {
        "task_id": t.task_id,
        "attempt": 1,
        "worker_id": "w1",
        "lease_epoch": 1,
        "lease_token": "tok",
    }
    late: list[c.Input] = [
        c.ReportCompleted("r-9", gone.workflow_id, **base),
        c.DispatchTask("d-9", gone.workflow_id, **base),
        c.FireTimer("t-9", gone.workflow_id, kind="workflow_timeout"),
    ]
    assert [answer_ended(gone, inp, d.now) for inp in late] == [[], [], []]


def test_markers_pack_and_drop_by_partition() -> None:
    index = EndedIndex()
    index.add(3, Ended("wf-a", "COMPLETED", 7))
    index.add(5, Ended("wf-b", "TERMINATED", 123_456))
    assert index.get("wf-a") == Ended("wf-a", "COMPLETED", 7)
    assert index.get("wf-b") == Ended("wf-b", "TERMINATED", 123_456)
    index.drop({3})
    assert index.get("wf-a") is None and len(index) == 1


@pytest.mark.parametrize("resting", [False, True], ids=["decoded", "resting"])
def test_retirement_picks_what_is_due_skips_what_the_batch_touched_and_unpicks(
    resting: bool,
) -> None:
    """Also for a state restored resting (ADR 52): retired from its header's fields, never
    decoded (its bytes here would not decode: a decode would raise)."""
    d = ended_driver()
    topics = Topics("t", 4)
    retire = Retirement(topics, RETAIN, max_per_batch=10)
    assert d.st.ended_at is not None
    held: WorkflowState | Resting = d.st
    if resting:
        held = Resting(d.workflow_id, d.st.status, d.st.seq, d.st.ended_at, b"{not json", {})
    retire.watch(held)
    states, where = KeptStates(), {d.workflow_id: 2}
    states.keep(held)
    later = d.st.ended_at + timedelta(seconds=RETAIN)
    assert retire.pick(later - timedelta(seconds=1), states, {}, where) == ([], [])
    assert retire.pick(later, states, {d.workflow_id: d.st}, where) == ([], [])  # touched
    retire.watch(d.st)  # as the commit of the touching batch does
    records, picked = retire.pick(later, states, {}, where)
    assert [(r.key, r.partition) for r in records] == [
        (d.workflow_id, 2),
        (ended_key(d.workflow_id), 2),
    ]
    assert records[0].value is None  # the tombstone of the snapshot
    assert records[1].value is not None
    assert decode_ended(records[1].value) == Ended(d.workflow_id, "COMPLETED", d.st.seq)
    retire.unpick()  # the batch aborted: the state is still held, and picked again
    again, picked = retire.pick(later, states, {}, where)
    assert again == records
    retire.forget(picked, states, where)
    assert len(states) == 0 and where == {} and states.decoded == 0
    assert retire.ended.get(d.workflow_id) == Ended(d.workflow_id, "COMPLETED", d.st.seq)
