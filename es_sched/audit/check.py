"""``check(log)``: every invariant the log alone can prove (I1, I2, I3, I5, I6) in one pass.

Each workflow's history is folded once with ``domain.evolve``, in log order; before each
event, I3 looks at the state (the live lease), and before each run of one input's events, I5
decides that input again from the same state. A history the fold refuses (a gap, an event that
does not apply) is reported and not folded further: what follows has no trustworthy state.
I4, which needs the read models, is ``projections.replay``'s verify, joined in by the caller.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from es_sched.audit.determinism import replay_run, runs
from es_sched.audit.invariants import (
    by_workflow,
    contiguous,
    fenced,
    history,
    no_lost_work,
    own_faults,
)
from es_sched.audit.log import At, Log, LoggedEvent, LoggedInput, Report, Violation
from es_sched.domain.context import NoScripts
from es_sched.domain.evolve import evolve
from es_sched.domain.refusals import is_refusal
from es_sched.domain.scripts import ScriptEngine
from es_sched.domain.state import WorkflowState
from es_sched.errors import EsSchedError

INVARIANTS = ("I1", "I2", "I3", "I5", "I6")
Progress = Callable[[int], None]  # workflows checked so far


def check(
    log: Log,
    idle: bool = False,
    scripts: ScriptEngine | None = None,
    progress: Progress | None = None,
) -> Report:
    """I1, I2, I3, I5 and I6 over ``log``. ``idle``: the system is declared idle (no input in
    flight), so a workflow without a terminal event is lost work, not work in progress."""
    engine = scripts or NoScripts()
    causes: dict[tuple[str, str], LoggedInput] = {}
    accepted_inputs = log.accepted()
    for li in accepted_inputs:
        assert li.inp is not None
        causes.setdefault((li.inp.workflow_id, li.inp.input_id), li)
    report = Report(violations=contiguous(log))
    final: dict[str, WorkflowState] = {}
    accepted: dict[tuple[str, str, int], At] = {}
    for n, (wf, events) in enumerate(by_workflow(log).items(), 1):
        state = _walk(wf, list(history(events)), causes, accepted, engine, report)
        if state is not None:
            final[wf] = state
        if progress is not None and n % 500 == 0:
            progress(n)
    lost, info = no_lost_work(log, final, idle)
    report.violations += lost
    report.violations += own_faults(log)
    report.info += info
    report.states = final
    report.violations.sort(key=lambda v: (v.invariant, v.workflow_id, v.at))
    by_invariant = Counter(v.invariant for v in report.violations)
    report.counts = {
        "events": len(log.events),
        "inputs": len(log.inputs),
        "refused_inputs": len(log.inputs) - len(accepted_inputs),  # dead-lettered (intake)
        "workflows": len(final),
        "refusals": sum(is_refusal(le.event) for le in log.events),
        "blacklistings": len(log.blacklistings),
        "open": sum(not st.terminal for st in final.values()),
        **{k: by_invariant.get(k, 0) for k in INVARIANTS},
    }
    return report


def _walk(
    wf: str,
    events: list[LoggedEvent],
    causes: dict[tuple[str, str], LoggedInput],
    accepted: dict[tuple[str, str, int], At],
    scripts: ScriptEngine,
    report: Report,
) -> WorkflowState | None:
    state: WorkflowState | None = None
    for run in runs(events):
        first = run[0].event
        if not is_refusal(first) and first.seq != (state.seq if state is not None else 0) + 1:
            return None  # a gap or a repeat: I2 reports it; nothing after it has a state
        cause = causes.get((wf, first.causation_id))
        report.violations += replay_run(state, run, cause, scripts)
        for le in run:
            if is_refusal(le.event):
                continue  # outside any history: never folded
            report.violations += fenced(state, le, cause, accepted)
            try:
                state = evolve(state, le.event)
            except EsSchedError as exc:
                report.violations.append(
                    Violation(
                        "I2",
                        wf,
                        (le.at,),
                        (f"the history does not fold here ({exc}); the rest of it is not checked"),
                    )
                )
                return None
    return state
