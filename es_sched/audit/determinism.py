"""I5: re-running ``decide`` over the recorded inputs reproduces the recorded events.

Like Temporal's replayer, which runs workflow code against a recorded history and fails on the
first command the history does not hold, this runs the decider's core against the log: every
run of events one input caused (same ``causation_id``, consecutive seqs: one call of
``decide``) is decided again from the fold of the history before it and compared, field by
field through the wire encoding, with what was recorded. What the shell gave the core is taken
from the record, never from today's world:

- ``now``: the time of the run's first event (one call of ``decide`` has one ``now``);
- fresh ids: an ``IdSource`` that hands back the ids the run recorded, in order (task ids of
  ``task.scheduled``, child ids of ``workflow.start_requested``); one asked for beyond them is
  ``unrecorded-id-N``, which shows as a mismatch;
- what was learned of run times (a dynamic timeout's lookup, ADR 65): the figures each
  ``task.scheduled`` of the run recorded in its ``timeout``, handed back per task type and
  size class in order (``recorded_learned``), never the stats topic; a tampered figure or
  timeout then decides differently and shows;
- a script that breached a limit depending on the machine (CPU time, its sandbox process
  ended, ADR 76): the breach its ``task.failed`` recorded, matched by the evaluation's
  fingerprint (``domain.scripts.RecordedBreaches``); it is not run again. Every other
  evaluation runs again in the caller's engine.
- a StartWorkflow's definitions, which the shell resolves from the registry and pins (ADR 12):
  those the recorded ``workflow.started`` carries. A refusal of a start that embedded no
  definition is compared on its id, seq and type only (the registry's answer then is unknown).
- a refusal after a history that ended: the decider had retired the state and answered from its
  ended marker (ADR 18), so it is replayed with ``retention.answer_ended`` over the marker of
  the folded state.

So a core change that decides a recorded input differently fails here. Inputs that caused no
event are not replayed: nothing records when they were decided, and their ``now`` matters
(a timer that was not yet due). Pure: the caller passes the script engine.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
from collections import defaultdict, deque
from collections.abc import Iterator
from typing import Any

from es_sched.audit.log import LoggedEvent, LoggedInput, Violation
from es_sched.domain import commands as c
from es_sched.domain.decide import decide_with_state
from es_sched.domain.events import (
    Event,
    TaskFailed,
    TaskScheduled,
    WorkflowStarted,
    WorkflowStartRequested,
)
from es_sched.domain.ids import IdSource
from es_sched.domain.learned import CUT_BY_TIMEOUT, RunStats
from es_sched.domain.refusals import is_refusal
from es_sched.domain.retention import answer_ended, marker
from es_sched.domain.scripts import RecordedBreaches, ScriptEngine
from es_sched.domain.state import WORKFLOW_TERMINAL, WorkflowState
from es_sched.domain.timeouts import Learned
from es_sched.errors import EsSchedError
from es_sched.serialization import encode_event

SHOWN = 160  # characters of a differing value in a message


def runs(events: list[LoggedEvent]) -> Iterator[list[LoggedEvent]]:
    """One workflow's events cut into the runs of one ``decide`` call each."""
    run: list[LoggedEvent] = []
    for le in events:
        if run and (
            le.event.causation_id != run[0].event.causation_id
            or is_refusal(le.event)
            or is_refusal(run[0].event)
        ):
            yield run
            run = []
        run.append(le)
    if run:
        yield run


def recorded_ids(events: list[Event]) -> IdSource:
    drawn: list[str] = []
    for e in events:
        if isinstance(e.payload, TaskScheduled):
            drawn.append(e.payload.task_id)
        elif isinstance(e.payload, WorkflowStartRequested):
            drawn.append(e.payload.child_workflow_id)
    given, extra = iter(drawn), itertools.count(1)
    return lambda: next(given, None) or f"unrecorded-id-{next(extra)}"


def recorded_scripts(events: list[Event], scripts: ScriptEngine) -> ScriptEngine:
    """``scripts``, but answering from the record the evaluations the run saw breach a limit."""
    reasons = [e.payload.reason for e in events if isinstance(e.payload, TaskFailed)]
    return RecordedBreaches(scripts, reasons) if reasons else scripts


def recorded_learned(events: list[Event]) -> Learned:
    """The learned lookup as the run saw it: per (task type, size class), the figures its
    ``task.scheduled`` events recorded, in order. A ``static`` record had too few samples, or
    (with enough) a figure it could not use, given back as NaN: either way the same choice;
    or too many runs cut by their timeout, given back as that count (``timeouts.censored``)."""
    seen: dict[tuple[str, str], deque[RunStats | None]] = defaultdict(deque)
    for e in events:
        p = e.payload
        if not isinstance(p, TaskScheduled) or not p.timeout:
            continue
        t, samples = p.timeout, int(p.timeout.get("samples") or 0)
        run = t.get("run_s") if t.get("source") == "learned" else None
        run_s = float(run) if isinstance(run, int | float) else math.nan
        stats = RunStats(
            task_type=p.task_type,
            size_class=str(t.get("size_class")),
            window_end=str(t.get("window_end", "")),
            samples=samples,
            run_p50_s=run_s,
            run_p95_s=run_s,
            run_p99_s=run_s,
            wait_p50_s=0.0,
            wait_p95_s=0.0,
            failures=0,
            failure_rate=0.0,
            failures_by_reason={CUT_BY_TIMEOUT: int(t.get("censored") or 0)},
        )
        seen[(p.task_type, stats.size_class)].append(stats if samples else None)

    def lookup(task_type: str, size_class: str) -> RunStats | None:
        figures = seen.get((task_type, size_class))
        return figures.popleft() if figures else None

    return lookup


def _as_recorded(inp: c.Input, first: Event) -> c.Input:
    if isinstance(inp, c.StartWorkflow) and isinstance(first.payload, WorkflowStarted):
        p = first.payload
        return dataclasses.replace(
            inp,
            definition=p.definition,
            taskdefs=p.taskdefs,
            subworkflow_definitions=p.subworkflow_definitions,
        )
    return inp


def _wire(event: Event) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(encode_event(event))
    return doc


def _first_difference(a: Any, b: Any, path: str = "") -> tuple[str, Any, Any] | None:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b), key=str):
            found = _first_difference(a.get(k), b.get(k), f"{path}.{k}" if path else str(k))
            if found is not None:
                return found
        return None
    return None if a == b else (path, a, b)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= SHOWN else text[:SHOWN] + "..."


def replay_run(
    state: WorkflowState | None,
    run: list[LoggedEvent],
    cause: LoggedInput | None,
    scripts: ScriptEngine,
) -> list[Violation]:
    """I5 for one run of events, given the state before it and the input that caused it."""
    first = run[0].event
    wf, where = first.workflow_id, tuple(le.at for le in run)
    if cause is None or cause.inp is None:
        return [
            Violation(
                "I5",
                wf,
                where[:1],
                (
                    f"{len(run)} event(s) from seq {first.seq} were caused by input "
                    f"{first.causation_id}, which is not in the input topics"
                ),
            )
        ]
    recorded = [le.event for le in run]
    inp = _as_recorded(cause.inp, first)
    try:
        if is_refusal(first) and state is not None and state.status in WORKFLOW_TERMINAL:
            replayed = answer_ended(marker(state), inp, first.occurred_at)  # retired (ADR 18)
        else:
            replayed, _ = decide_with_state(
                state,
                inp,
                first.occurred_at,
                recorded_ids(recorded),
                recorded_scripts(recorded, scripts),
                recorded_learned(recorded),
            )
    except EsSchedError as exc:
        return [Violation("I5", wf, (where[0], cause.at), f"decide raised on replay: {exc}")]
    if is_refusal(first) and isinstance(inp, c.StartWorkflow) and inp.definition is None:
        have = [(e.event_id, e.seq, e.type) for e in replayed]
        if have == [(first.event_id, first.seq, first.type)]:
            return []
    want, got = [_wire(e) for e in recorded], [_wire(e) for e in replayed]
    if want == got:
        return []
    head = (
        f"{cause.inp.TYPE} {cause.inp.input_id} decided again gives {len(got)} event(s) "
        f"where the log has {len(want)} (seq {first.seq}..{recorded[-1].seq})"
    )
    for i, (w, g) in enumerate(zip(want, got, strict=False)):
        diff = _first_difference(w, g)
        if diff is not None:
            path, a, b = diff
            return [
                Violation(
                    "I5",
                    wf,
                    (where[i], cause.at),
                    (
                        f"{head}; first difference at seq {w.get('seq')} {w.get('type')}: {path} "
                        f"recorded {_short(a)}, replayed {_short(b)}"
                    ),
                )
            ]
    extra = got[len(want) :] or want[len(got) :]
    side = "replay adds" if len(got) > len(want) else "replay lacks"
    at = where[min(len(got), len(where) - 1)]
    return [
        Violation(
            "I5", wf, (at, cause.at), (f"{head}; {side} {[e.get('type') for e in extra][:5]}")
        )
    ]
