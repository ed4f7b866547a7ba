"""Properties of restart and rerun over random histories (hypothesis): the real definitions of
``test_properties`` simulated with random worker failures; when the workflow ends otherwise
than COMPLETED, an operator reruns it from a random task (or restarts it) and the simulation
runs on. Whatever happened: each (task, attempt) has at most one outcome (I3), seq stays
contiguous, the fold equals the decider's state, and the projectors' rows equal the fold."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from es_sched.domain import commands as c
from es_sched.domain.evolve import fold
from es_sched.projections.views import comparable, fold_rows, rows_of
from es_sched.simulate import Simulation
from tests.unit.domain.harness import SCRIPTS
from tests.unit.domain.test_properties import CASES, SETTINGS, script_entry

OUTCOMES = ("task.completed", "task.failed", "task.timed_out", "task.canceled")


@SETTINGS
@given(
    st.integers(0, len(CASES) - 1),
    st.lists(script_entry, max_size=12),
    st.floats(0, 1),
    st.booleans(),
)
def test_a_rerun_never_gives_a_task_attempt_two_outcomes(
    case: int, script: list[dict[str, Any]], pick: float, restart: bool
) -> None:
    main, defs, taskdefs, inp = CASES[case]
    sim = Simulation(defs, taskdefs, script, scripts=SCRIPTS)
    sim.run(main, inp)
    wf = sim.workflows["wf-1"]
    assert wf.state is not None
    for round_ in range(2):  # a rerun of a rerun too
        if wf.state.status == "COMPLETED" and not restart:
            break
        refs = sorted(wf.state.latest)
        if restart or not refs:
            cmd: c.Command = c.RestartWorkflow(f"restart-{round_}", "wf-1", actor="test")
        else:
            ref = refs[min(int(pick * len(refs)), len(refs) - 1)]
            cmd = c.RerunWorkflow(f"rerun-{round_}", "wf-1", task=ref, actor="test")
        sim.act(cmd)
    events = wf.events
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    state = fold(events)
    assert state == wf.state
    seen: set[tuple[str, int]] = set()
    for e in events:
        if e.type in OUTCOMES:
            task_id = e.payload.task_id  # type: ignore[attr-defined]
            key = (task_id, state.tasks[task_id].attempt)
            assert key not in seen, f"two outcomes for {key}"
            seen.add(key)
    rows = fold_rows(events)
    assert rows is not None
    row, tasks = rows_of(state)
    assert comparable(rows.workflow) == comparable(row)
    have = {r["task_id"]: {**comparable(r), "version": None} for r in rows.tasks.values()}
    assert have == {r["task_id"]: {**comparable(r), "version": None} for r in tasks}
