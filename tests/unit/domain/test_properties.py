"""Properties over random valid histories (hypothesis).

Histories come from simulating real definitions (the examples and Conductor's own test
workflows) with random worker behaviour: any task may fail, fail terminally or succeed, any
number of times. For each history: folding a prefix then the rest equals folding it all,
replaying gives equal states, the same inputs give the same events (decide is deterministic),
seq is contiguous and ids unique, and every event survives the wire format unchanged.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from es_sched.domain.events import Event
from es_sched.domain.evolve import fold
from es_sched.serialization import decode_event, encode_event
from es_sched.simulate import Simulation
from tests.unit.domain.harness import SCRIPTS

ROOT = Path(__file__).resolve().parents[3]


def _load(path: Path) -> Any:
    return json.loads(path.read_text())


def _cases() -> list[
    tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]]
]:
    media = _load(ROOT / "examples" / "media_pipeline.json")
    taskdefs = _load(ROOT / "examples" / "media_taskdefs.json")
    cases = [(media, [media], taskdefs, {"source_uri": "file:///v.mp4", "asset_id": "a"})]
    for folder in sorted((ROOT / "tests" / "fixtures" / "conductor").iterdir()):
        if not (folder / "workflow.json").exists():
            continue
        main = _load(folder / "workflow.json")
        others = [_load(p) for p in folder.glob("*workflow_*.json")]
        tds = _load(folder / "taskdefs.json") if (folder / "taskdefs.json").exists() else []
        inp = _load(folder / "input.json") if (folder / "input.json").exists() else {}
        cases.append((main, [main, *others], tds, inp))
    return cases


CASES = _cases()
REFS = sorted(
    {
        t
        for main, *_ in CASES
        for t in json.dumps(main).split('"taskReferenceName": "')[1:]
        for t in [t.split('"')[0]]
    }
)
STATUSES = ["COMPLETED", "FAILED", "FAILED", "FAILED_WITH_TERMINAL_ERROR"]

script_entry = st.fixed_dictionaries(
    {
        "ref": st.sampled_from(REFS),
        "status": st.sampled_from(STATUSES),
        "output": st.fixed_dictionaries({"height": st.sampled_from([360, 480, 720, 1080, 2160])}),
    }
)


def _history(case: int, script: list[dict[str, Any]]) -> list[Event]:
    main, defs, taskdefs, inp = CASES[case]
    sim = Simulation(defs, taskdefs, script, scripts=SCRIPTS)
    sim.run(main, inp)
    return sim.workflows["wf-1"].events


histories = st.builds(
    lambda case, script, cut: (_history(case, script), cut),
    st.integers(0, len(CASES) - 1),
    st.lists(script_entry, max_size=12),
    st.floats(0, 1),
)
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(histories)
def test_folding_a_prefix_then_the_rest_equals_folding_everything(
    sample: tuple[list[Event], float],
) -> None:
    events, cut = sample
    k = int(len(events) * cut)
    assert fold(events[k:], fold(events[:k])) == fold(events)


@SETTINGS
@given(st.integers(0, len(CASES) - 1), st.lists(script_entry, max_size=12))
def test_decide_is_deterministic_and_replay_gives_equal_states(
    case: int, script: list[dict[str, Any]]
) -> None:
    first, second = _history(case, script), _history(case, script)
    assert first == second  # same inputs, clock and ids: the same events, ids included
    assert fold(first) == fold(second)
    assert [e.seq for e in first] == list(range(1, len(first) + 1))
    assert len({e.event_id for e in first}) == len(first)


@SETTINGS
@given(histories)
def test_every_event_survives_the_wire_format(sample: tuple[list[Event], float]) -> None:
    events, _ = sample
    decoded = [decode_event(encode_event(e)) for e in events]
    assert decoded == events
    assert fold(decoded) == fold(events)
