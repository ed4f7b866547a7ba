"""What the decider writes for a batch of events: the records, never the I/O.

``outbound(topics, state, events, resolve)`` maps one workflow's new events (and its state after
them) to Kafka records: every event to ``events``, then each of ``domain.effects.effects`` as a
record. ``QueueTask`` -> ``ready`` (keyed by rate-limit key, else task name); ``SetTimer`` ->
``timers`` (keyed by timer id, on ``partition``, the workflow's partition the decider read it
from: a transaction then touches the partitions of its workflows, not every timers partition;
ADR 48), ``ClearTimer`` -> its tombstone there (same key, same partition); ``WakeRetry`` -> its
delay tier (keyed by workflow); ``StartChild``, ``TerminateChild`` and ``NotifyParent`` -> the
input for the other workflow on ``commands`` (keyed by that workflow). What follows an event is
decided in the domain, not here; ``resolve`` is the registry look-up a ``StartChild`` without an
embedded definition needs, ``requeue_after`` the reconciler's bound
(``ES_SCHED_RUN_REQUEUE_AFTER_S``, ADR 15). The changelog snapshot is added once per workflow per
batch by the caller (``snapshot``), on the workflow's partition, after the definition bundle it
names when that partition does not hold it yet (ADR 18).
``refused(topics, events)`` maps a refusal outside any history (``workflow.rejected``) to its
event record alone.
"""

from __future__ import annotations

from typing import NamedTuple, assert_never

from es_sched.domain import commands as c
from es_sched.domain import sla
from es_sched.domain.definitions import TaskLimits
from es_sched.domain.effects import (
    ClearTimer,
    NotifyParent,
    QueueTask,
    SetTimer,
    StartChild,
    TerminateChild,
    WakeRetry,
    child_input,
    effects,
    task_limits,
)
from es_sched.domain.events import Event
from es_sched.domain.pins import Lookup
from es_sched.domain.state import WorkflowState
from es_sched.domain.timers import Timer
from es_sched.kafka.topics import Topics
from es_sched.serialization import encode_event, encode_input
from es_sched.serialization.changelog import definition_key, ended_header
from es_sched.serialization.chunks import chunk_key, split
from es_sched.serialization.codec import format_time
from es_sched.serialization.records import (
    Retry,
    SlaDoc,
    encode_ready,
    encode_retry,
    encode_timer,
)
from es_sched.serialization.snapshots import definition_record, encode_state

Resolver = Lookup
"""(name, version) -> (definition, taskdefs) from the registry, or None when unknown."""


class Record(NamedTuple):
    """A record to write (a named tuple: cheap to make, thousands per batch; ADR 30)."""

    topic: str
    key: str
    value: bytes | None
    headers: list[tuple[str, str | bytes | None]] | None = None
    partition: int | None = None  # None: by key


def ready_record(
    topics: Topics,
    st: WorkflowState,
    task_id: str,
    limits: TaskLimits | None = None,
    steps_to_end: int = 0,
) -> Record:
    """The ready-queue record of one task instance, from the state (so a task handed back by
    an expired lease is queued again durably, not only in a dispatcher's memory). Keyed by
    its evaluated rate-limit key when it has one, else by its name: every task one limit
    counts lands on one partition, so one dispatcher counts them all (ADR 13)."""
    t = st.tasks[task_id]
    value = encode_ready(
        workflow_id=st.workflow_id,
        task_id=t.task_id,
        ref=t.ref,
        name=t.name,
        attempt=t.attempt,
        input=t.input,
        priority=t.priority,
        resources=t.resources,
        rate_limit_key=t.rate_limit_key,
        tenant=st.tenant,
        callback=t.callback,
        workflow_started_at=st.created_at,
        limits=limits or task_limits(st, task_id),
        steps_to_end=steps_to_end,
        sla=ready_sla(st, t.def_ref),
    )
    return Record(topics.ready, t.rate_limit_key or t.name, value)


def ready_sla(st: WorkflowState, def_ref: str) -> SlaDoc | None:
    """The ``sla`` of a ready record (ADR 67): None for a workflow without tier or deadline."""
    if st.sla_tier is None and st.deadline is None:
        return None
    return SlaDoc(
        tier=st.sla_tier,
        deadline=None if st.deadline is None else format_time(st.deadline),
        after=list(sla.chain_after(st.definition, def_ref)),
    )


def timer_record(topics: Topics, timer: Timer, partition: int | None = None) -> Record:
    """The ``timers`` record of one durable timer (compacted: a later one of the id replaces it),
    keyed by timer id, on ``partition`` (the workflow's; None: by key)."""
    return Record(topics.timers, timer.timer_id, encode_timer(timer), partition=partition)


def retry_record(topics: Topics, wake: WakeRetry) -> Record:
    """The record of one retry wake-up, on the tier of its delay, keyed by workflow."""
    retry = Retry(
        workflow_id=wake.workflow_id,
        task_id=wake.task_id,
        attempt=wake.attempt,
        next_attempt=wake.next_attempt,
        due_at=wake.due_at,
        delay_seconds=wake.delay_seconds,
    )
    topic = topics.retry(topics.retry_tier_for(wake.delay_seconds))
    return Record(topic, wake.workflow_id, encode_retry(retry))


def command_record(topics: Topics, inp: c.Input) -> Record:
    """An input for another workflow (a child to start or terminate, a parent to notify)."""
    return Record(topics.commands, inp.workflow_id, encode_input(inp))


def outbound(
    topics: Topics,
    st: WorkflowState,
    events: list[Event],
    resolve: Resolver,
    requeue_after: float | None = None,
    partition: int | None = None,
) -> list[Record]:
    out = [Record(topics.events, st.workflow_id, encode_event(e)) for e in events]
    for fx in effects(st, events, requeue_after):
        match fx:
            case QueueTask():
                out.append(ready_record(topics, st, fx.task_id, fx.limits, fx.steps_to_end))
            case SetTimer():
                out.append(timer_record(topics, fx.timer, partition))
            case ClearTimer():  # a tombstone: the timer service forgets the timer unfired
                out.append(Record(topics.timers, fx.timer_id, None, partition=partition))
            case WakeRetry():
                out.append(retry_record(topics, fx))
            case StartChild():
                inp = child_input(fx, resolve)
                if inp is not None:
                    out.append(command_record(topics, inp))
            case TerminateChild() | NotifyParent():
                out.append(command_record(topics, fx.input))
            case _:
                assert_never(fx)
    return out


def refused(topics: Topics, events: list[Event]) -> list[Record]:
    """The records of refusals outside any history (``domain.refusals``): the events alone,
    keyed by the workflow id the input named; no snapshot, no effect follows them."""
    return [Record(topics.events, e.workflow_id, encode_event(e)) for e in events]


def snapshot(
    topics: Topics, st: WorkflowState, partition: int, bundles: set[str], previous_chunks: int = 0
) -> tuple[list[Record], int]:
    """The changelog records of ``st``: its definition bundle when ``bundles`` (the hashes the
    partition holds, updated here) lacks it, then the snapshot that names it, as one record or,
    when large, as chunks and a head (``serialization.chunks``, ADR 19); and how many chunk
    records it took. Chunks a larger earlier snapshot left beyond them get tombstones."""
    digest, raw = definition_record(st)
    out = []
    if digest not in bundles:
        bundles.add(digest)
        out.append(Record(topics.changelog, definition_key(digest), raw, partition=partition))
    parts = split(st.workflow_id, encode_state(st, digest))
    chunks = len(parts) - 1 if len(parts) > 1 else 0
    out += [Record(topics.changelog, key, value, partition=partition) for key, value in parts]
    header = ended_header(st)  # the head (last) says the workflow ended: ADR 52
    if header is not None:
        out[-1] = out[-1]._replace(headers=[header])
    out += chunk_tombstones(topics, st.workflow_id, partition, chunks, previous_chunks)
    return out, chunks


def chunk_tombstones(
    topics: Topics, workflow_id: str, partition: int, keep: int, previous: int
) -> list[Record]:
    """Tombstones for chunk records ``keep``+1..``previous`` of a workflow's snapshot (all of
    them, ``keep=0``, when its state is retired)."""
    return [
        Record(topics.changelog, chunk_key(workflow_id, i), None, partition=partition)
        for i in range(keep + 1, previous + 1)
    ]
