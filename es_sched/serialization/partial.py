"""A field or two of an event, read without decoding the event: for readers that pick by type.

Two readers of the events topic act on a handful of event types and drop every other event:
the dispatcher (which task attempt ended, which lease the decider ended) and a client waiting
for workflows to end (which one reached its final event). Decoding every event whole (schema,
upcast, domain object) to drop nearly all of them would be most of their work, so these read
the JSON, look at ``type`` and take only their fields. Neither the schema nor an upcaster is
needed for that: only the decider writes the events topic (``codec.encode_event``), and every
version of these types has these fields. A reader that needs more of an event it picked decodes
it whole (``decode_event``).

- ``decode_task_end(raw)``: a ``TaskEnd`` for an event that ends a task attempt
  (``TASK_ENDS``; a failure with its reason, ``terminal`` and ``host_fault``, for the
  dispatcher's blacklist, ADR 58) or a lease the decider ended (``LEASE_ENDED``, with its
  epoch), None for any
  other event; ``SchemaError`` for what is not JSON, or a picked event without those fields.
- ``decode_workflow_end(raw)``: the workflow id of a workflow's final event
  (``WORKFLOW_ENDS``), None for anything else, JSON or not: a reader is not the events topic's
  writer, which dead-letters its own faults.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from es_sched.domain.events import (
    LeaseExpired,
    TaskCanceled,
    TaskCompleted,
    TaskCompletedWithErrors,
    TaskFailed,
    TaskTimedOut,
    WorkflowCompleted,
    WorkflowEnded,
    WorkflowRejected,
)
from es_sched.errors import SchemaError
from es_sched.serialization.codec import load_record

TASK_ENDS = frozenset(
    c.TYPE for c in (TaskCompleted, TaskFailed, TaskTimedOut, TaskCanceled, TaskCompletedWithErrors)
)
LEASE_ENDED = LeaseExpired.TYPE
WORKFLOW_ENDS = frozenset(c.TYPE for c in (WorkflowCompleted, WorkflowEnded, WorkflowRejected))
_TASK_PICKED = TASK_ENDS | {LEASE_ENDED}


class TaskEnd(NamedTuple):
    """A task attempt's end, or the end of one of its leases (``LEASE_ENDED``)."""

    task_id: str
    type: str
    lease_epoch: int  # of the lease that ended (``LEASE_ENDED``); 0 for the other types
    # A task.failed's reason and whose fault it is (``es_sched.blacklist.blame``, ADR 58)
    reason: str = ""
    terminal: bool = False
    host_fault: bool = False


def decode_task_end(raw: bytes | None) -> TaskEnd | None:
    """The task an event ends (or whose lease it ends), None for an event of another type."""
    doc: Any = load_record(raw, "event")
    if not isinstance(doc, dict) or doc.get("type") not in _TASK_PICKED:
        return None
    found = doc.get("payload")
    payload: dict[str, Any] = found if isinstance(found, dict) else {}
    task_id = payload.get("task_id")
    if not isinstance(task_id, str):
        raise SchemaError(f"{doc.get('type')} event without a task_id")
    if doc["type"] == TaskFailed.TYPE:
        reason = payload.get("reason")
        return TaskEnd(
            task_id,
            TaskFailed.TYPE,
            0,
            reason if isinstance(reason, str) else "",
            payload.get("terminal") is True,
            payload.get("host_fault") is True,
        )
    if doc["type"] != LEASE_ENDED:
        return TaskEnd(task_id, str(doc["type"]), 0)
    epoch = payload.get("lease_epoch")
    if not isinstance(epoch, int) or isinstance(epoch, bool):
        raise SchemaError(f"{LEASE_ENDED} event without an integer lease_epoch")
    return TaskEnd(task_id, LEASE_ENDED, epoch)


def decode_workflow_end(raw: bytes | None) -> str | None:
    """The workflow whose final event ``raw`` is; None for any other record, JSON or not."""
    try:
        doc: Any = load_record(raw, "event")
    except SchemaError:
        return None
    if not isinstance(doc, dict) or doc.get("type") not in WORKFLOW_ENDS:
        return None
    workflow_id = doc.get("workflow_id")
    return workflow_id if isinstance(workflow_id, str) else None
