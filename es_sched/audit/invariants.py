"""I1 (no lost work) and I2 (contiguous seq, no duplicates) over a ``Log``; I3 (one accepted
outcome per attempt, from the live lease) as a check of each event against the state before it.

Pure: no I/O, no clock. Every rule reads only recorded facts:

- I1: an accepted StartWorkflow (``domain.intake``: within the command cap, decoded, under its
  workflow id, with the id the decider accepts) is answered by
  ``workflow.started`` (its ``command_id``) or by ``workflow.rejected`` (its ``causation_id``,
  ADR 11); no ``workflow.started`` lacks its command; and, when the caller declares the system
  idle, every started workflow has ended (otherwise an open workflow is information).
- I2: per workflow, the events that are not refusals have seq 1..n in offset order, and no
  event id is written under two offsets; a refusal has seq 0 and the id of its input.
- I3: a ``task.completed`` / ``task.failed`` is the first outcome of its (task, attempt), and
  when a worker's report caused it, the report names the lease then live (worker, epoch,
  token, attempt), as ``task.dispatched`` set it in the fold: the fencing rule of
  ``task_inputs.report``, checked from the outside.
- I6: a worker is blacklisted only for its own faults (ADR 58): each failure a blacklisting on
  the config topic cites is in the log as that fault of that task: a lease expiry (a
  ``task.lease_expired`` event or the dispatcher's ``dispatcher.lease_expired`` input) or a
  host fault (a non-terminal ``task.failed`` with ``host_fault``, or that worker's report of
  one); an input's fault (a terminal failure) or an ordinary failure is never cited.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator

from es_sched.audit.log import At, Log, LoggedEvent, LoggedInput, Violation
from es_sched.blacklist import HOST_FAULT, LEASE_EXPIRED
from es_sched.domain import commands as c
from es_sched.domain.events import LeaseExpired, TaskCompleted, TaskFailed, WorkflowStarted
from es_sched.domain.ids import refusal_event_id
from es_sched.domain.refusals import REFUSAL_SEQ, is_refusal
from es_sched.domain.state import WorkflowState

OUTCOMES = (TaskCompleted, TaskFailed)


def by_workflow(log: Log) -> dict[str, list[LoggedEvent]]:
    """Each workflow's events in log order (one workflow lives on one partition)."""
    out: dict[str, list[LoggedEvent]] = defaultdict(list)
    for le in sorted(log.events, key=lambda le: le.at):
        out[le.event.workflow_id].append(le)
    return dict(out)


def history(events: list[LoggedEvent]) -> Iterator[LoggedEvent]:
    """One workflow's events without the second copy of an event id (I2 reports it)."""
    seen: set[str] = set()
    for le in events:
        if is_refusal(le.event):
            yield le  # the same input refused twice is the same event; readers dedupe it
        elif le.event.event_id not in seen:
            seen.add(le.event.event_id)
            yield le


def contiguous(log: Log) -> list[Violation]:
    """I2."""
    found: list[Violation] = []
    first: dict[str, At] = {}
    for wf, events in by_workflow(log).items():
        due = 1
        for le in events:
            e, at = le.event, le.at
            if is_refusal(e):
                want = refusal_event_id(wf, e.causation_id)
                if (e.seq, e.event_id) != (REFUSAL_SEQ, want):
                    found.append(
                        Violation(
                            "I2",
                            wf,
                            (at,),
                            (
                                f"refusal {e.event_id} has seq {e.seq}; a refusal has seq "
                                f"{REFUSAL_SEQ} and id {want}"
                            ),
                        )
                    )
                continue
            if e.event_id in first:
                found.append(
                    Violation(
                        "I2",
                        wf,
                        (first[e.event_id], at),
                        (f"event {e.event_id} ({e.type}, seq {e.seq}) appears twice"),
                    )
                )
                continue
            first[e.event_id] = at
            if e.seq != due:
                what = "a gap" if e.seq > due else "a repeat"
                found.append(
                    Violation(
                        "I2",
                        wf,
                        (at,),
                        (f"{e.type} has seq {e.seq} where seq {due} was due ({what})"),
                    )
                )
            due = max(due, e.seq) + 1
    return found


def no_lost_work(
    log: Log, final: dict[str, WorkflowState], idle: bool
) -> tuple[list[Violation], list[Violation]]:
    """I1: (violations, information). ``final`` is the fold of each workflow's history."""
    found: list[Violation] = []
    info: list[Violation] = []
    answered: set[tuple[str, str]] = set()
    started_at: dict[tuple[str, str], At] = {}
    last: dict[str, At] = {}
    for le in log.events:
        e = le.event
        if is_refusal(e):
            answered.add((e.workflow_id, e.causation_id))
        elif isinstance(e.payload, WorkflowStarted):
            key = (e.workflow_id, e.payload.command_id or e.causation_id)
            answered.add(key)
            started_at.setdefault(key, le.at)
        if not is_refusal(e):
            last[e.workflow_id] = max(le.at, last.get(e.workflow_id, le.at))
    commanded: set[tuple[str, str]] = set()
    for li in log.accepted():
        inp = li.inp
        if not isinstance(inp, c.StartWorkflow):
            continue
        commanded.add((inp.workflow_id, inp.input_id))
        if (inp.workflow_id, inp.input_id) not in answered:
            found.append(
                Violation(
                    "I1",
                    inp.workflow_id,
                    (li.at,),
                    (
                        f"StartWorkflow {inp.input_id} was accepted but neither workflow.started "
                        "nor workflow.rejected answers it (lost)"
                    ),
                )
            )
    for (wf, command_id), at in sorted(started_at.items(), key=lambda kv: kv[1]):
        if (wf, command_id) not in commanded:
            found.append(
                Violation(
                    "I1",
                    wf,
                    (at,),
                    (
                        f"workflow.started names command {command_id}, which is not in the "
                        "commands topic (invented work)"
                    ),
                )
            )
    for wf, st in sorted(final.items()):
        if st.terminal:
            continue
        open_ = Violation(
            "I1",
            wf,
            (last[wf],),
            (f"workflow is {st.status} at seq {st.seq}, with no terminal event"),
        )
        (found if idle else info).append(open_)
    return found, info


def fenced(
    st: WorkflowState | None,
    le: LoggedEvent,
    cause: LoggedInput | None,
    accepted: dict[tuple[str, str, int], At],
) -> list[Violation]:
    """I3 for one event, given the state before it and the input that caused it."""
    p, wf, at = le.event.payload, le.event.workflow_id, le.at
    if not isinstance(p, OUTCOMES):
        return []
    task = st.tasks.get(p.task_id) if st is not None else None
    if task is None:
        return [Violation("I3", wf, (at,), f"{le.event.type} of unknown task {p.task_id}")]
    found: list[Violation] = []
    key = (wf, p.task_id, task.attempt)
    if key in accepted:
        found.append(
            Violation(
                "I3",
                wf,
                (accepted[key], at),
                (
                    f"task {p.task_id} attempt {task.attempt} has a second accepted outcome "
                    f"({le.event.type})"
                ),
            )
        )
    accepted.setdefault(key, at)
    inp = cause.inp if cause is not None else None
    if isinstance(inp, c.WorkerReport) and inp.task_id == p.task_id:
        live = (task.worker_id, task.lease_epoch, task.lease_token, task.attempt)
        got = (inp.worker_id, inp.lease_epoch, inp.lease_token, inp.attempt)
        if task.lease_token is None or live != got:
            assert cause is not None
            was = live if task.lease_token is not None else None
            message = (
                f"{le.event.type} of task {p.task_id} accepted from (worker, epoch, token, "
                f"attempt) {got}, but the live lease was {was}"
            )
            found.append(Violation("I3", wf, (at, cause.at), message))
    return found


def own_faults(log: Log) -> list[Violation]:
    """I6: every failure a blacklisting cites is its worker's own fault in the log."""
    if not log.blacklistings:
        return []
    expired: set[str] = set()
    host: set[tuple[str, str]] = set()  # (task id, worker id); "" when the event names none
    for le in log.events:
        p = le.event.payload
        if isinstance(p, LeaseExpired):
            expired.add(p.task_id)
        elif isinstance(p, TaskFailed) and p.host_fault and not p.terminal:
            host.add((p.task_id, ""))
    for li in log.accepted():
        inp = li.inp
        if isinstance(inp, c.ExpireLease):
            expired.add(inp.task_id)
        elif isinstance(inp, c.ReportFailed) and inp.host_fault and not inp.terminal:
            host.add((inp.task_id, inp.worker_id))
    out = []
    for lb in log.blacklistings:
        b = lb.blacklisting
        for f in b.failures:
            if f.fault == LEASE_EXPIRED:
                ok = f.task_id in expired
            elif f.fault == HOST_FAULT:
                ok = (f.task_id, "") in host or (f.task_id, b.worker_id) in host
            else:
                ok = False
            if not ok:
                out.append(
                    Violation(
                        "I6",
                        f"worker {b.worker_id}",
                        (lb.at,),
                        f"blacklisted for task {f.task_id} ({f.fault}: {f.reason}), "
                        "which the log does not hold as the worker's own fault",
                    )
                )
    return out
