"""Smart retry (ADR 71): a retry policy's input per attempt, parking a task out of retries for
review, and an operator's retry (with edited input) or fail, with their refusals."""

from __future__ import annotations

from typing import Any

import pytest

from es_sched.domain import commands as c
from es_sched.domain.evolve import fold
from es_sched.domain.retry import input_changes_problems, input_for_attempt
from es_sched.domain.validation import validate_workflow
from es_sched.projections.views import fold_rows, rows_of
from tests.unit.domain.harness import Driver, task, workflow

pytestmark = pytest.mark.unit

CHANGES: list[dict[str, Any]] = [{"preset": "veryfast"}, {"codec": "h264"}, {"height": 480}]
BASE = {"height": 720, "codec": "h265", "preset": "medium"}


def test_each_attempt_merges_one_more_change_in_order() -> None:
    assert input_for_attempt(BASE, CHANGES, 1) == BASE
    assert input_for_attempt(BASE, CHANGES, 2) == {**BASE, "preset": "veryfast"}
    assert input_for_attempt(BASE, CHANGES, 3) == {
        "height": 720,
        "codec": "h264",
        "preset": "veryfast",
    }
    past_the_end = {"height": 480, "codec": "h264", "preset": "veryfast"}
    assert (
        input_for_attempt(BASE, CHANGES, 4) == input_for_attempt(BASE, CHANGES, 9) == past_the_end
    )
    assert BASE == {"height": 720, "codec": "h265", "preset": "medium"}  # never changed in place


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ({"preset": "fast"}, "must be a list of objects"),
        ([{"preset": "fast"}, {}], "retryInputChanges[1] must be a non-empty object"),
        ([{"preset": "fast"}, "h264"], "retryInputChanges[1] must be a non-empty object"),
        ([{"height": "${probe.output.height}"}], "retryInputChanges[0].height is an expression"),
        ([{"a": 1}] * 11, "at most 10"),
    ],
)
def test_malformed_input_changes_are_refused_with_the_reason(value: Any, says: str) -> None:
    problems = input_changes_problems(value)
    assert any(says in p for p in problems), problems
    doc = workflow(task("enc", retryInputChanges=value))
    assert any(says in p and "task 'enc'" in p for p in validate_workflow(doc))


def test_on_exhausted_is_fail_or_review() -> None:
    assert validate_workflow(workflow(task("enc", onExhausted="REVIEW"))) == []
    problems = validate_workflow(workflow(task("enc", onExhausted="PAGE_SOMEONE")))
    assert problems == ["task 'enc': onExhausted must be one of FAIL, REVIEW, got 'PAGE_SOMEONE'"]
    td = {"name": "encode", "retryInputChanges": "faster"}
    assert any(
        "taskdef 'encode'" in p for p in validate_workflow(workflow(task("e", "encode")), [td])
    )


TASKDEF = {
    "name": "encode",
    "retryCount": 2,
    "retryDelaySeconds": 0,
    "retryInputChanges": [{"preset": "veryfast"}, {"codec": "h264"}],
    "onExhausted": "REVIEW",
}


def parked_driver(**task_extra: Any) -> Driver:
    """A workflow whose ``enc`` failed all three attempts and is parked, then a ``done`` task."""
    definition = workflow(
        task("enc", name="encode", inputParameters=dict(BASE), **task_extra), task("done")
    )
    d = Driver(definition, taskdefs=[TASKDEF])
    for _ in range(3):
        d.report("enc", "FAILED", reason="ffmpeg exited 1")
    return d


def test_the_decided_input_is_in_each_attempts_task_scheduled() -> None:
    d = parked_driver()
    scheduled = [e.payload for e in d.events if e.type == "task.scheduled"]
    assert [(p.attempt, p.input) for p in scheduled] == [  # type: ignore[attr-defined]
        (1, BASE),
        (2, {**BASE, "preset": "veryfast"}),
        (3, {**BASE, "preset": "veryfast", "codec": "h264"}),
    ]
    assert fold(d.events) == d.st  # replay reproduces it from the log alone


def test_a_workflow_task_overrides_the_taskdefs_changes() -> None:
    d = parked_driver(retryInputChanges=[{"height": 360}])
    assert d.latest("enc").attempt == 3
    inputs = [t.input["height"] for t in d.st.tasks.values() if t.ref == "enc"]
    assert inputs == [720, 360, 360]


def test_a_task_out_of_retries_parks_and_its_workflow_keeps_running() -> None:
    d = parked_driver()
    parked = d.latest("enc")
    assert (parked.status, parked.attempt, d.st.status) == ("PARKED_FOR_REVIEW", 3, "RUNNING")
    event = d.events[-1]
    assert event.type == "task.parked_for_review"
    assert (event.payload.reason, event.payload.attempts) == ("ffmpeg exited 1", 3)  # type: ignore[attr-defined]
    assert d.st.instance("done") is None  # the walk waits for the operator
    # The read model's fold shows the parked status, as the core's does.
    rows = fold_rows(d.events)
    assert rows is not None and rows.tasks[parked.task_id]["status"] == "PARKED_FOR_REVIEW"
    assert [r["status"] for r in rows_of(d.st)[1]] == [r["status"] for r in rows.tasks.values()]


def test_without_review_a_task_out_of_retries_fails_its_workflow_as_before() -> None:
    d = Driver(workflow(task("enc", name="encode")), taskdefs=[{**TASKDEF, "onExhausted": "FAIL"}])
    for _ in range(3):
        d.report("enc", "FAILED")
    assert d.st.status == "FAILED" and not any(e.type == "task.parked_for_review" for e in d.events)


def review(d: Driver, decision: str, **fields: Any) -> list[str]:
    cmd = c.ReviewTask(
        f"review-{len(d.events)}",
        d.workflow_id,
        actor="ops:alice",
        task_id=fields.pop("task_id", None) or d.latest("enc").task_id,
        decision=decision,
        **fields,
    )
    return [e.type for e in d.send(cmd)]


def test_an_operator_retries_with_edited_input_and_the_workflow_completes() -> None:
    d = parked_driver()
    edited = {**BASE, "codec": "h264", "height": 480}
    types = review(d, "retry", input=edited, reason="smaller")
    assert types[:2] == ["task.reviewed", "task.scheduled"]
    retried = d.latest("enc")
    assert (retried.attempt, retried.input, retried.status) == (4, edited, "SCHEDULED")
    before = next(t for t in d.st.tasks.values() if t.ref == "enc" and t.attempt == 3)
    assert before.status == "FAILED" and before.retried
    assert all(e.actor == "ops:alice" for e in d.events[-2:])
    d.report("enc", "COMPLETED", output={"ok": True})
    d.report("done", "COMPLETED")
    assert d.st.status == "COMPLETED"
    assert fold(d.events) == d.st


def test_a_retry_without_edits_reruns_the_parked_input_and_parks_again_on_failure() -> None:
    d = parked_driver()
    parked_input = d.latest("enc").input
    review(d, "retry")
    assert d.latest("enc").input == parked_input
    d.report("enc", "FAILED", reason="again")
    assert (d.latest("enc").status, d.latest("enc").attempt) == ("PARKED_FOR_REVIEW", 4)
    assert d.st.status == "RUNNING"


def test_an_operator_fails_a_parked_task_and_its_workflow_fails() -> None:
    d = parked_driver()
    types = review(d, "fail", reason="source is corrupt")
    assert types[0] == "task.reviewed"
    assert d.latest("enc").status == "FAILED_WITH_TERMINAL_ERROR"
    assert d.latest("enc").reason == "failed in review: source is corrupt"
    assert d.st.status == "FAILED" and "failed in review" in d.st.reason
    rows = fold_rows(d.events)
    assert rows is not None
    assert rows.tasks[d.latest("enc").task_id]["reason"] == "failed in review: source is corrupt"


def test_failing_an_optional_parked_task_lets_the_workflow_go_on() -> None:
    d = parked_driver(optional=True)
    review(d, "fail")
    assert d.latest("enc").status == "COMPLETED_WITH_ERRORS"
    assert d.latest("done").status == "SCHEDULED"


def rejected(d: Driver, decision: str, **fields: Any) -> str:
    before = d.st.seq
    sent = d.send(
        c.ReviewTask(
            f"review-{len(d.events)}",
            d.workflow_id,
            task_id=fields.pop("task_id", None) or d.latest("enc").task_id,
            decision=decision,
            **fields,
        )
    )
    assert [e.type for e in sent] == ["command.rejected"] and d.st.seq == before + 1
    return str(sent[0].payload.reason)  # type: ignore[attr-defined]


def test_reviews_the_workflow_cannot_take_are_refused_as_events() -> None:
    d = parked_driver()
    assert "decision must be one of retry, fail" in rejected(d, "approve")
    assert "only a retry takes one" in rejected(d, "fail", input={"height": 1})
    assert "no task 'nope'" in rejected(d, "retry", task_id="nope")
    first = next(iter(d.st.tasks.values()))
    assert "is not awaiting review; it is FAILED" in rejected(d, "retry", task_id=first.task_id)
    assert d.latest("enc").status == "PARKED_FOR_REVIEW"  # nothing changed
    d.send(c.TerminateWorkflow("stop", d.workflow_id, reason="enough"))
    assert d.latest("enc").status == "CANCELED"  # a parked task ends with its workflow
    assert "only while its workflow runs" in rejected(d, "retry")
