"""Workflow state snapshots for the decider's compacted changelog.

A snapshot is the state as JSON: the definition and TaskDefs as their original documents (parsed
again, memoised, on restore), tasks as plain objects, times in ISO 8601. ``snapshot_version``
guards the format; restoring an unknown version fails loudly instead of guessing.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import orjson

from es_sched.domain.definitions import (
    DefinitionError,
    parse_task_def,
    parse_tasks,
    parse_workflow_cached,
)
from es_sched.domain.state import TaskState, WorkflowState
from es_sched.errors import SchemaError

SNAPSHOT_VERSION = 1
_TASK_TIMES = frozenset(
    {"scheduled_at", "started_at", "ended_at", "last_progress_at", "retry_due_at", "wait_until"}
)
_WF_TIMES = frozenset({"created_at", "updated_at", "ended_at"})


def _parse(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value is not None else None


_FRAGMENTS: dict[int, tuple[object, orjson.Fragment]] = {}


def _fragment(doc: Any) -> orjson.Fragment:
    """``doc`` serialised once: a workflow's definition is in every one of its snapshots."""
    hit = _FRAGMENTS.get(id(doc))
    if hit is not None and hit[0] is doc:
        return hit[1]
    fragment = orjson.Fragment(orjson.dumps(doc, option=orjson.OPT_SORT_KEYS))
    _FRAGMENTS[id(doc)] = (doc, fragment)
    if len(_FRAGMENTS) > 1024:
        _FRAGMENTS.pop(next(iter(_FRAGMENTS)))
    return fragment


def state_to_dict(st: WorkflowState) -> dict[str, Any]:
    """The snapshot document; times stay ``datetime`` (orjson writes them as RFC 3339) and the
    definition and TaskDefs are pre-serialised fragments shared by every snapshot."""
    return {
        "snapshot_version": SNAPSHOT_VERSION,
        "workflow_id": st.workflow_id,
        "definition": _fragment(st.definition.raw),
        "taskdefs": [_fragment(td.raw) for td in st.taskdefs.values()],
        "status": st.status,
        "input": st.input,
        "created_at": st.created_at,
        "correlation_id": st.correlation_id,
        "seq": st.seq,
        "priority": st.priority,
        "tenant": st.tenant,
        "output": st.output,
        "variables": st.variables,
        "reason": st.reason,
        "ending": st.ending,
        "updated_at": st.updated_at,
        "ended_at": st.ended_at,
        "parent_workflow_id": st.parent_workflow_id,
        "parent_task_id": st.parent_task_id,
        "tasks": [task.__dict__ for task in st.tasks.values()],  # plain dataclasses, all JSON
        "latest": st.latest,
        "dynamic": [_fragment(t.raw) for t in st.dynamic.values()],
        "subworkflow_definitions": [_fragment(d) for d in st.subworkflow_definitions],
        "recent_inputs": list(st.recent_inputs),
    }


def state_from_dict(doc: dict[str, Any]) -> WorkflowState:
    if doc.get("snapshot_version") != SNAPSHOT_VERSION:
        raise SchemaError(f"unknown snapshot_version {doc.get('snapshot_version')!r}")
    definition, problems = parse_workflow_cached(doc["definition"])
    if definition is None or problems:
        raise DefinitionError(problems)
    taskdefs = {}
    for raw in doc["taskdefs"]:
        td, _ = parse_task_def(raw)
        if td is not None:
            taskdefs[td.name] = td
    tasks = {}
    for row in doc["tasks"]:
        values: dict[str, Any] = {k: (_parse(v) if k in _TASK_TIMES else v) for k, v in row.items()}
        tasks[row["task_id"]] = TaskState(**values)
    dynamic = {t.ref: t for t in parse_tasks(doc["dynamic"], [], "snapshot dynamic tasks")}
    fields = {
        k: v
        for k, v in doc.items()
        if k not in ("snapshot_version", "definition", "taskdefs", "tasks", "dynamic")
    }
    for key in _WF_TIMES:
        fields[key] = _parse(fields[key])
    fields["subworkflow_definitions"] = tuple(fields["subworkflow_definitions"])
    fields["recent_inputs"] = tuple(fields["recent_inputs"])
    created = fields.pop("created_at")
    assert created is not None
    return WorkflowState(
        definition=definition,
        taskdefs=taskdefs,
        tasks=tasks,
        dynamic=dynamic,
        created_at=created,
        **fields,
    )


def encode_state(st: WorkflowState) -> bytes:
    return orjson.dumps(state_to_dict(st), option=orjson.OPT_SORT_KEYS)


def decode_state(raw: bytes) -> WorkflowState:
    try:
        return state_from_dict(orjson.loads(raw))
    except (ValueError, KeyError, TypeError) as exc:
        raise SchemaError(f"unreadable decider snapshot: {exc}") from None
