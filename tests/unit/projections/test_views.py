"""The projectors' fold (``views.apply``) agrees with the decider's core (``domain.fold`` then
``rows_of``) on every recorded history, and treats duplicates and orphans as no change."""

from __future__ import annotations

from dataclasses import replace

import pytest

from es_sched.domain import events as e
from es_sched.domain.evolve import fold
from es_sched.projections.views import (
    LARGE_BYTES,
    Rows,
    apply,
    comparable,
    fold_rows,
    is_ref,
    rows_of,
)
from testkit.golden import NAMES, history


def without_task_versions(rows: list[dict[str, object]]) -> list[dict[str, object]]:
    return sorted(
        ({**comparable(r), "version": None} for r in rows), key=lambda r: str(r["task_id"])
    )


@pytest.mark.parametrize("name", NAMES)
def test_both_folds_agree_on_a_recorded_history(name: str) -> None:
    events = history(name)
    rows = fold_rows(events)
    state = fold(events)
    assert rows is not None and state is not None
    wf, tasks = rows_of(state)
    assert comparable(rows.workflow) == comparable(wf)
    assert without_task_versions(list(rows.tasks.values())) == without_task_versions(tasks)
    assert rows.workflow["version"] == events[-1].seq


def test_the_exhausted_history_has_retried_attempts_and_a_failed_workflow() -> None:
    rows = fold_rows(history("media_transcode_exhausted"))
    assert rows is not None and rows.workflow["status"] == "FAILED"
    transcode = [t for t in rows.tasks.values() if t["name"] == "media.transcode"]
    assert len(transcode) > 1
    assert sum(not t["retried"] for t in transcode) == len({t["ref"] for t in transcode})


def test_a_redelivered_event_and_an_orphan_change_nothing() -> None:
    events = history("media_480")
    rows = fold_rows(events)
    assert rows is not None
    for old in (events[0], events[3], events[-1]):
        assert apply(rows, old).duplicate
    assert apply(None, events[2]).orphan
    assert Rows.load(rows.workflow, list(rows.tasks.values())).by_ref == rows.by_ref


def test_large_inputs_are_referenced_not_copied() -> None:
    events = history("media_480")
    first = events[0]
    assert isinstance(first.payload, e.WorkflowStarted)
    big = replace(first, payload=replace(first.payload, input={"blob": "x" * LARGE_BYTES}))
    rows = fold_rows([big])
    assert rows is not None and is_ref(rows.workflow["input"])
    assert rows.workflow["input"]["seq"] == first.seq
    assert rows.workflow["input"]["bytes"] > LARGE_BYTES


def test_a_refusal_outside_any_history_changes_no_row() -> None:
    events = history("media_480")
    refusal = e.Event(
        "00000000-0000-5000-8000-000000000000",
        events[0].workflow_id,
        0,
        events[0].occurred_at,
        "cmd-cancel",
        events[0].workflow_id,
        e.WorkflowRejected("cmd-cancel", "workflow.cancel", "unknown workflow"),
    )
    change = apply(None, refusal)
    assert change.refusal and change.workflow is None and not change.orphan
    rows = fold_rows([refusal, *events])  # refused first, started later under the same id
    assert rows is not None and rows == fold_rows(events)
    assert apply(rows, refusal).workflow is None
