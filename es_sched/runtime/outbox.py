"""What the decider writes for a batch of events: the records, never the I/O.

``outbound(topics, state, events, resolve)`` maps one workflow's new events (and its state after
them) to Kafka records: every event to ``events``; worker tasks to ``ready`` (keyed by task
name), and again after an expired lease; timers to ``timers`` (keyed by timer id); retry
wake-ups to their delay tier; child workflow starts, cancellations and endings as commands to
the other workflow's key. The changelog snapshot is added once per workflow per batch by the
caller.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from es_sched.domain import commands as c
from es_sched.domain.events import (
    Event,
    LeaseExpired,
    TaskCanceled,
    TaskRetryScheduled,
    TaskScheduled,
    WorkflowCompleted,
    WorkflowEnded,
    WorkflowStartRequested,
)
from es_sched.domain.state import WorkflowState
from es_sched.domain.timers import timers_for
from es_sched.kafka.topics import Topics
from es_sched.serialization import encode_event, encode_input
from es_sched.serialization.records import Retry, encode_ready, encode_retry, encode_timer
from es_sched.serialization.snapshots import encode_state

WORKER_TYPES = frozenset({"SIMPLE", "CALLBACK"})
Resolver = Callable[[str, int | None], tuple[dict[str, Any], list[dict[str, Any]]] | None]
"""(name, version) -> (definition, taskdefs) from the registry, or None when unknown."""


@dataclass(frozen=True)
class Record:
    topic: str
    key: str
    value: bytes | None
    headers: list[tuple[str, str | bytes | None]] = field(default_factory=list)


def ready_record(topics: Topics, st: WorkflowState, task_id: str) -> Record:
    """The ready-queue record of one task instance, from the state (so a task handed back by
    an expired lease is queued again durably, not only in a dispatcher's memory)."""
    t = st.tasks[task_id]
    value = encode_ready(
        workflow_id=st.workflow_id, task_id=t.task_id, ref=t.ref, name=t.name,
        attempt=t.attempt, input=t.input, priority=t.priority, resources=t.resources,
        rate_limit_key=t.rate_limit_key, tenant=st.tenant, callback=t.callback,
        workflow_started_at=st.created_at,
    )  # fmt: skip
    return Record(topics.ready, t.name, value)


def outbound(
    topics: Topics, st: WorkflowState, events: list[Event], resolve: Resolver
) -> list[Record]:
    wf = st.workflow_id
    out = [Record(topics.events, wf, encode_event(e)) for e in events]
    for event in events:
        p = event.payload
        for timer in timers_for(st, event):
            if timer.kind == "retry":
                continue  # retries travel through the retry tiers, see below
            out.append(Record(topics.timers, timer.timer_id, encode_timer(timer)))
        if isinstance(p, TaskScheduled):
            definition = st.lookup_task(p.def_ref)
            worker = definition is not None and definition.type in WORKER_TYPES
            if worker and not st.tasks[p.task_id].terminal:  # not failed while scheduled
                out.append(ready_record(topics, st, p.task_id))
        elif isinstance(p, LeaseExpired):
            task = st.tasks[p.task_id]
            if not task.terminal and st.latest.get(task.ref) == task.task_id:
                out.append(ready_record(topics, st, p.task_id))
        elif isinstance(p, TaskRetryScheduled):
            tier = topics.retry_tier_for(p.delay_seconds)
            retry = Retry(
                workflow_id=wf, task_id=p.task_id, attempt=st.tasks[p.task_id].attempt,
                next_attempt=p.next_attempt, due_at=p.due_at, delay_seconds=p.delay_seconds,
            )  # fmt: skip
            out.append(Record(topics.retry(tier), wf, encode_retry(retry)))
        elif isinstance(p, WorkflowStartRequested):
            out += _start_child(topics, st, p, resolve)
        elif isinstance(p, TaskCanceled):
            child = st.tasks[p.task_id].child_workflow_id
            if child:
                cmd = c.TerminateWorkflow(
                    f"cancel-child:{p.task_id}", child, reason="parent task canceled"
                )
                out.append(Record(topics.commands, child, encode_input(cmd)))
        elif isinstance(p, WorkflowCompleted | WorkflowEnded) and st.parent_workflow_id:
            status = "COMPLETED" if isinstance(p, WorkflowCompleted) else p.status
            ended = c.ChildWorkflowEnded(
                f"child-ended:{wf}", st.parent_workflow_id, child_workflow_id=wf,
                task_id=st.parent_task_id or "", status=status, output=dict(p.output),
                reason="" if isinstance(p, WorkflowCompleted) else p.reason,
            )  # fmt: skip
            out.append(Record(topics.commands, st.parent_workflow_id, encode_input(ended)))
    return out


def _start_child(
    topics: Topics, st: WorkflowState, p: WorkflowStartRequested, resolve: Resolver
) -> list[Record]:
    found = (p.definition, []) if p.definition else resolve(p.name, p.version)
    if found is None:
        if p.task_id is None:
            return []  # START_WORKFLOW / failureWorkflow of an unknown definition: nothing to run
        failed = c.ChildWorkflowEnded(
            f"child-ended:{p.child_workflow_id}", st.workflow_id,
            child_workflow_id=p.child_workflow_id, task_id=p.task_id, status="FAILED",
            reason=f"no definition for workflow {p.name!r}",
        )  # fmt: skip
        return [Record(topics.commands, st.workflow_id, encode_input(failed))]
    definition, taskdefs = found
    start = c.StartWorkflow(
        f"start-child:{p.child_workflow_id}", p.child_workflow_id, name=p.name, version=p.version,
        input=dict(p.input), priority=st.priority, tenant=st.tenant,
        correlation_id=st.correlation_id, definition=definition,
        taskdefs=taskdefs or [dict(td.raw) for td in st.taskdefs.values()],
        parent_workflow_id=st.workflow_id if p.task_id else None, parent_task_id=p.task_id,
    )  # fmt: skip
    return [Record(topics.commands, p.child_workflow_id, encode_input(start))]


def snapshot(topics: Topics, st: WorkflowState) -> Record:
    return Record(topics.changelog, st.workflow_id, encode_state(st))
