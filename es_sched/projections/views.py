"""The read models, as a pure fold: ``apply(rows, event)`` and ``rows_of(state)``.

A workflow projects to one workflow row and one task row per task instance (an attempt is its
own instance, with its own id). Rows are plain dicts of JSON-able values (datetimes stay
datetimes), the same for PostgreSQL rows and search documents. ``version`` is the seq of the
last event applied (for a task row: the last event that changed it), so stores can refuse a
stale write with a version guard, and an event whose seq is not above the row's version is a
duplicate (``apply`` returns no change).

Inputs and outputs over ``LARGE_BYTES`` (encoded) are not copied: the row holds a reference to
the archived event that carries them, ``{"$ref": "event", "workflow_id", "seq", "path",
"bytes"}``.

A refusal outside any history (``workflow.rejected``, seq 0) changes no row: ``apply`` marks it
``refusal``, and a store may keep it apart (PostgreSQL: the ``rejections`` table).

Two folds of one log must agree: ``rows_of(domain.fold(events))`` (the decider's core, used by
``es-sched replay --verify``) and repeated ``apply`` (the projectors). Unit tests check it on
every golden history; the auditors check it against the stores.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, cast

import orjson

from es_sched.domain import events as e
from es_sched.domain.refusals import is_refusal
from es_sched.domain.review import failed_reason
from es_sched.domain.state import TaskState, WorkflowState

Row = dict[str, Any]
LARGE_BYTES = 16 * 1024

WORKFLOW_FIELDS = (
    "workflow_id",
    "name",
    "def_version",
    "tenant",
    "priority",
    "status",
    "ending",
    "reason",
    "correlation_id",
    "parent_workflow_id",
    "input",
    "output",
    "created_at",
    "updated_at",
    "ended_at",
    "version",
)
TASK_FIELDS = (
    "task_id",
    "workflow_id",
    "ref",
    "name",
    "task_type",
    "attempt",
    "iteration",
    "status",
    "worker_id",
    "lease_epoch",
    "reason",
    "resources",
    "input",
    "output",
    "progress",
    "scheduled_at",
    "started_at",
    "ended_at",
    "retried",
    "version",
)

# Task statuses set by events (the domain's constants, spelled out so this module reads alone).
_ENDED = {
    e.TaskCompleted: "COMPLETED",
    e.TaskCompletedWithErrors: "COMPLETED_WITH_ERRORS",
    e.TaskTimedOut: "TIMED_OUT",
    e.TaskCanceled: "CANCELED",
}


@dataclass
class Change:
    """What one event did to a workflow's rows (nothing for a duplicate or an orphan)."""

    workflow: Row | None = None
    tasks: dict[str, Row] = field(default_factory=dict)
    duplicate: bool = False
    orphan: bool = False  # an event for a workflow whose start is not projected
    refusal: bool = False  # workflow.rejected: outside any history, no row changes (ADR 11)


def bounded(value: Any, workflow_id: str, seq: int, path: str) -> Any:
    """``value`` itself, or a reference to the archived event when it is large."""
    size = len(orjson.dumps(value))
    if size <= LARGE_BYTES:
        return value
    return {"$ref": "event", "workflow_id": workflow_id, "seq": seq, "path": path, "bytes": size}


def _started(event: e.Event, p: e.WorkflowStarted) -> Row:
    return {
        "workflow_id": event.workflow_id,
        "name": str(p.definition.get("name", "")),
        "def_version": int(p.definition.get("version") or 1),
        "tenant": p.tenant,
        "priority": p.priority,
        "status": "RUNNING",
        "ending": None,
        "reason": "",
        "correlation_id": event.correlation_id,
        "parent_workflow_id": p.parent_workflow_id,
        "input": bounded(p.input, event.workflow_id, event.seq, "payload.input"),
        "output": {},
        "created_at": event.occurred_at,
        "updated_at": event.occurred_at,
        "ended_at": None,
        "version": event.seq,
    }


def _scheduled(event: e.Event, p: e.TaskScheduled) -> Row:
    return {
        "task_id": p.task_id,
        "workflow_id": event.workflow_id,
        "ref": p.ref,
        "name": p.name,
        "task_type": p.task_type,
        "attempt": p.attempt,
        "iteration": p.iteration,
        "status": p.status,
        "worker_id": None,
        "lease_epoch": 0,
        "reason": "",
        "resources": dict(p.resources),
        "input": bounded(p.input, event.workflow_id, event.seq, "payload.input"),
        "output": {},
        "progress": 0.0,
        "scheduled_at": event.occurred_at,
        "started_at": event.occurred_at if p.status == "IN_PROGRESS" else None,
        "ended_at": None,
        "retried": False,
        "version": event.seq,
    }


def _out(event: e.Event, value: Any) -> Any:
    return bounded(value, event.workflow_id, event.seq, "payload.output")


def _workflow_changes(event: e.Event, p: e.Payload) -> Row | None:
    match p:
        case e.WorkflowCompleted():
            return {
                "status": "COMPLETED",
                "output": _out(event, p.output),
                "reason": p.reason,
                "ended_at": event.occurred_at,
                "ending": None,
            }
        case e.WorkflowEnding():
            return {
                "ending": p.status,
                "reason": p.reason,
                **({"output": _out(event, p.output)} if p.output else {}),
            }
        case e.WorkflowEnded():
            return {
                "status": p.status,
                "reason": p.reason,
                "ending": None,
                "ended_at": event.occurred_at,
                **({"output": _out(event, p.output)} if p.output else {}),
            }
        case e.WorkflowPaused():
            return {"status": "PAUSED"}
        case e.WorkflowResumed():
            return {"status": "RUNNING"}
        case e.WorkflowRetried():
            return {"status": "RUNNING", "ending": None, "reason": "", "ended_at": None}
        case e.WorkflowRestarted() | e.WorkflowRerun():
            again: Row = {
                "status": "RUNNING",
                "ending": None,
                "reason": "",
                "ended_at": None,
                "output": {},
                "input": bounded(p.input, event.workflow_id, event.seq, "payload.input"),
            }
            if isinstance(p, e.WorkflowRestarted):
                again["created_at"] = event.occurred_at  # a restart runs the clock again
                if p.definition is not None:
                    again["name"] = str(p.definition.get("name", ""))
                    again["def_version"] = int(p.definition.get("version") or 1)
            return again
    return None


def _task_changes(event: e.Event, p: e.Payload) -> Row | None:
    match p:
        case e.TaskDispatched():
            return {"worker_id": p.worker_id, "lease_epoch": p.lease_epoch}
        case e.TaskStarted():
            return {
                "status": "IN_PROGRESS",
                "started_at": event.occurred_at,
                "worker_id": p.worker_id,
            }
        case e.TaskProgressed():
            return {"progress": p.percent}
        case e.TaskCompleted():
            return {
                "status": _ENDED[type(p)],
                "ended_at": event.occurred_at,
                "output": _out(event, p.output),
            }
        case e.TaskCompletedWithErrors():
            kept = {} if p.output is None else {"output": _out(event, p.output)}
            return {"status": _ENDED[type(p)], "ended_at": event.occurred_at, **kept}
        case e.TaskFailed():
            return {
                "status": "FAILED_WITH_TERMINAL_ERROR" if p.terminal else "FAILED",
                "ended_at": event.occurred_at,
                "reason": p.reason,
                "output": _out(event, p.output),
            }
        case e.TaskTimedOut():
            return {
                "status": _ENDED[type(p)],
                "ended_at": event.occurred_at,
                "reason": f"{p.kind} timeout",
            }
        case e.TaskCanceled():
            return {"status": _ENDED[type(p)], "ended_at": event.occurred_at, "reason": p.reason}
        case e.LeaseExpired():
            return {"status": "SCHEDULED", "worker_id": None}
        case e.LoopIterated():
            return {"iteration": p.iteration, "output": _out(event, p.output)}
        case e.TaskParkedForReview():
            return {"status": "PARKED_FOR_REVIEW"}  # the review queue's rows (ADR 71)
        case e.TaskReviewed():
            if p.decision == "fail":
                return {"status": "FAILED_WITH_TERMINAL_ERROR", "reason": failed_reason(p.reason)}
            return {"status": "FAILED"}  # the next attempt's row follows
    return None


@dataclass
class Rows:
    """One workflow's rows: the projectors' cache entry and what ``apply`` folds over."""

    workflow: Row
    tasks: dict[str, Row] = field(default_factory=dict)  # by task id
    by_ref: dict[str, str] = field(default_factory=dict)  # ref -> task id of the newest attempt

    @classmethod
    def load(cls, workflow: Row, tasks: list[Row]) -> Rows:
        """From stored rows: the newest attempt of a ref is the one not ``retried``."""
        rows = cls(workflow, {t["task_id"]: t for t in tasks})
        rows.by_ref = {t["ref"]: t["task_id"] for t in tasks if not t["retried"]}
        return rows

    def merge(self, change: Change) -> None:
        if change.workflow is not None:
            self.workflow = change.workflow
        for task_id, row in change.tasks.items():
            self.tasks[task_id] = row
            if not row["retried"]:
                self.by_ref[row["ref"]] = task_id
            elif self.by_ref.get(row["ref"]) == task_id:  # reset by a restart or rerun
                del self.by_ref[row["ref"]]


def apply(rows: Rows | None, event: e.Event) -> Change:
    """The rows ``event`` changes (``rows`` is left as it is: ``Rows.merge`` the result)."""
    p = event.payload
    if is_refusal(event):
        return Change(refusal=True)
    if isinstance(p, e.WorkflowStarted):
        if rows is not None:
            return Change(duplicate=True)
        return Change(workflow=_started(event, p))
    if rows is None:
        return Change(orphan=True)
    if event.seq <= int(rows.workflow["version"]):
        return Change(duplicate=True)
    wf = {**rows.workflow, **(_workflow_changes(event, p) or {})}
    wf["version"], wf["updated_at"] = event.seq, event.occurred_at
    change = Change(workflow=wf)
    if isinstance(p, e.WorkflowRestarted | e.WorkflowRerun):
        for reset in p.reset:  # no longer current: rows stay, as the reset instances' history
            change.tasks[reset] = {**rows.tasks[reset], "retried": True, "version": event.seq}
        return change
    if isinstance(p, e.TaskScheduled):
        previous_id = rows.by_ref.get(p.ref)
        if previous_id is not None and previous_id != p.task_id:
            previous = rows.tasks[previous_id]
            change.tasks[previous_id] = {**previous, "retried": True, "version": event.seq}
        change.tasks[p.task_id] = _scheduled(event, p)
        return change
    task_id = cast(str | None, getattr(p, "task_id", None))
    task = rows.tasks.get(task_id) if task_id else None
    if task is not None:
        patch = _task_changes(event, p)
        if patch is not None:
            change.tasks[task["task_id"]] = {**task, **patch, "version": event.seq}
    return change


def fold_rows(events: list[e.Event], rows: Rows | None = None) -> Rows | None:
    """``apply`` over a history (tests and rebuilds of one workflow)."""
    for event in events:
        change = apply(rows, event)
        if rows is None and change.workflow is not None:
            rows = Rows(change.workflow)
            continue
        if rows is not None:
            rows.merge(change)
    return rows


def rows_of(state: WorkflowState) -> tuple[Row, list[Row]]:
    """The rows of a folded state (versions of task rows excepted: the state does not keep
    which event last changed each task; they are None here)."""
    started_input = state.input
    wf: Row = {
        "workflow_id": state.workflow_id,
        "name": state.definition.name,
        "def_version": state.definition.version,
        "tenant": state.tenant,
        "priority": state.priority,
        "status": state.status,
        "ending": state.ending,
        "reason": state.reason,
        "correlation_id": state.correlation_id,
        "parent_workflow_id": state.parent_workflow_id,
        "input": started_input,
        "output": state.output,
        "created_at": state.created_at,
        "updated_at": state.updated_at,
        "ended_at": state.ended_at,
        "version": state.seq,
    }
    return wf, [_task_row(state.workflow_id, t) for t in state.tasks.values()]


def _task_row(workflow_id: str, t: TaskState) -> Row:
    return {
        "task_id": t.task_id,
        "workflow_id": workflow_id,
        "ref": t.ref,
        "name": t.name,
        "task_type": t.task_type,
        "attempt": t.attempt,
        "iteration": t.iteration,
        "status": t.status,
        "worker_id": t.worker_id,
        "lease_epoch": t.lease_epoch,
        "reason": t.reason,
        "resources": dict(t.resources),
        "input": t.input,
        "output": t.output,
        "progress": t.progress,
        "scheduled_at": t.scheduled_at,
        "started_at": t.started_at,
        "ended_at": t.ended_at,
        "retried": t.retried,
        "version": None,
    }


def is_ref(value: Any) -> bool:
    return isinstance(value, dict) and value.get("$ref") == "event"


def comparable(row: Row) -> Row:
    """A row as the auditors compare it: references to large values stand for any value,
    times to the microsecond (what PostgreSQL keeps)."""
    out: Row = {}
    for key, value in row.items():
        if is_ref(value) or (
            isinstance(value, dict | list) and len(orjson.dumps(value)) > LARGE_BYTES
        ):
            out[key] = "<ref>"
        elif isinstance(value, datetime):
            out[key] = value.isoformat(timespec="microseconds")
        else:
            out[key] = value
    return out
