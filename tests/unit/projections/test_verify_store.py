"""``replay.verify_store`` on rows a fake store hands back: equal rows (most of them) take the
fast exit and report nothing, a task row differing only in its ``version`` (which the folded
state does not keep) is equal, and any other difference is still named field by field."""

from __future__ import annotations

from datetime import timedelta

from es_sched.domain.evolve import fold
from es_sched.projections.replay import Replayed, verify_store
from es_sched.projections.views import Rows, fold_rows
from testkit.golden import history


class FakeStore:
    name = "fake"

    def __init__(self, rows: dict[str, Rows]) -> None:
        self.rows = rows

    def load(self, workflow_ids: list[str]) -> dict[str, Rows]:
        return {wf: self.rows[wf] for wf in workflow_ids if wf in self.rows}


def _replayed_and_rows() -> tuple[Replayed, Rows]:
    events = history("media_1080_v1")
    state, rows = fold(events), fold_rows(events)
    assert state is not None and rows is not None
    return Replayed(states={state.workflow_id: state}), rows


def test_the_projected_rows_of_a_history_equal_its_fold() -> None:
    replayed, rows = _replayed_and_rows()
    store = FakeStore({rows.workflow["workflow_id"]: rows})
    assert verify_store(replayed, store, ["wf-1"]) == []  # type: ignore[arg-type]


def test_a_changed_field_is_named_and_a_task_version_is_not() -> None:
    replayed, rows = _replayed_and_rows()
    task_id, task = next(iter(rows.tasks.items()))
    rows.tasks[task_id] = {**task, "version": 999, "status": "CANCELED"}
    later = rows.workflow["updated_at"] + timedelta(seconds=1)
    rows.workflow = {**rows.workflow, "updated_at": later}
    found = verify_store(replayed, FakeStore({"wf-1": rows}), ["wf-1"])  # type: ignore[arg-type]
    assert sorted((m.kind, m.id, m.field) for m in found) == [
        ("task", task_id, "status"),
        ("workflow", "wf-1", "updated_at"),
    ]
