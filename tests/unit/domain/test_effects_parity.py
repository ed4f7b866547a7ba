"""The runtime and the simulator carry out the same effects.

At every decision of every golden history (the recorded files, and their cases run live), every
example in ``examples/``, every Conductor fixture and a few hand-made runs, the records
``runtime.outbox.outbound`` writes, decoded back the way their consumers decode them (dispatcher,
timer service, retry relay, decider), must hold exactly the work the simulator put on its own
queues and timer heap: the same tasks queued, the same fires under the same input ids, the
same children started, terminated and reported, input for input.
"""

from __future__ import annotations

import functools
import itertools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from es_sched.dispatch.records import ready_task
from es_sched.domain import commands as c
from es_sched.domain.events import Event
from es_sched.domain.evolve import fold
from es_sched.kafka.topics import Topics
from es_sched.runtime.outbox import outbound
from es_sched.runtime.retry_relay import parse_retry
from es_sched.runtime.timer_service import fire_input, parse_timer
from es_sched.scripting.quickjs import QuickJsEngine
from es_sched.serialization import decode_event, decode_input
from es_sched.simulate import Simulation, _Workflow
from testkit import ROOT
from testkit.golden import GOLDEN
from tests.unit.domain.golden import CASES
from tests.unit.domain.harness import T0, Driver, task, workflow

TOPICS = Topics("fx", 3)
RETRY_TOPICS = {TOPICS.retry(t) for t in TOPICS.retry_tiers}
CONDUCTOR = ROOT / "tests" / "fixtures" / "conductor"
Work = tuple[Any, ...]
Step = tuple[list[Work], list[Work]]  # (runtime, simulator) for one decision


def _key(work: Work) -> str:
    return repr(work)


def runtime_work(st: Any, events: list[Event], sim: Simulation) -> list[Work]:
    """The follow-up records of one decision, decoded by the roles that consume them."""
    out: list[Work] = []
    for rec in outbound(TOPICS, st, events, sim.resolve, sim.requeue_after):
        if rec.topic == TOPICS.timers and rec.value is None:  # a ClearTimer's tombstone
            out.append(("clear", rec.key))
            continue
        assert rec.value is not None
        if rec.topic == TOPICS.events:
            continue
        if rec.topic == TOPICS.ready:
            ready = ready_task(rec.value, None, T0)
            assert rec.key == (ready.rate_limit_key or ready.task_type)  # ADR 13
            out.append(("ready", ready.workflow_id, ready.task_id, ready.attempt))
        elif rec.topic == TOPICS.timers:
            out.append(("fire", fire_input(parse_timer(rec.key, rec.value))))
        elif rec.topic in RETRY_TOPICS:
            doc = json.loads(rec.value)
            assert rec.topic == TOPICS.retry(TOPICS.retry_tier_for(doc["delay_seconds"]))
            out.append(("fire", parse_retry(rec.value)))
        else:
            assert rec.topic == TOPICS.commands, rec.topic
            inp = decode_input(rec.value)
            assert rec.key == inp.workflow_id
            out.append(("input", inp))
    return sorted(out, key=_key)


class Parity(Simulation):
    """A simulation that, at every decision, also asks the runtime's outbox what to write."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.steps: list[Step] = []

    def follow(self, wf_id: str, events: list[Event]) -> None:
        queued, timers = len(self.queue), {seq for _, seq, _, _ in self.timers}
        cleared = len(self.cleared)
        super().follow(wf_id, events)
        done: list[Work] = [("clear", timer) for timer in self.cleared[cleared:]]
        for target, inp in list(self.queue)[queued:]:
            assert target == inp.workflow_id
            if isinstance(inp, c.DispatchTask):  # the in-memory dispatcher took a queued task
                done.append(("ready", target, inp.task_id, inp.attempt))
            elif not isinstance(inp, c.WorkerReport):  # reports are the scripted worker's
                done.append(("input", inp))
        for _, seq, target, fire in self.timers:
            if seq not in timers:
                assert target == fire.workflow_id
                done.append(("fire", fire))
        runtime = runtime_work(self.workflows[wf_id].state, events, self)
        self.steps.append((runtime, sorted(done, key=_key)))


def _json(path: Path, default: Any = None) -> Any:
    return json.loads(path.read_text()) if path.exists() else default


def _run(
    definitions: list[dict[str, Any]],
    taskdefs: list[dict[str, Any]],
    script: list[dict[str, Any]],
    inp: dict[str, Any],
    requeue_after: float | None = None,
) -> list[Step]:
    sim = Parity(
        definitions, taskdefs, script, scripts=QuickJsEngine(), requeue_after=requeue_after
    )
    sim.run(definitions[0], inp)
    return sim.steps


def _history(events: list[Event], sim: Simulation) -> list[Step]:
    """Replay a recorded history decision by decision (events share their input's causation)."""
    assert isinstance(sim, Parity)
    st = None
    for _, group in itertools.groupby(events, key=lambda e: e.causation_id):
        batch = list(group)
        st = fold(batch, st)
        assert st is not None
        sim.workflows[st.workflow_id] = _Workflow(state=st)
        sim.follow(st.workflow_id, batch)
    return sim.steps


def _media() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    examples = ROOT / "examples"
    taskdefs = _json(examples / "media_taskdefs.json")
    definitions = [_json(p) for p in sorted(examples.glob("*.json")) if p.stem != "media_taskdefs"]
    return definitions, taskdefs


def _example(name: str) -> list[Step]:
    definitions, taskdefs = _media()
    main = next(d for d in definitions if d["name"] == name)
    inp = CASES["media_480"][3] if name == "media_pipeline" else {}
    return _run([main, *definitions], taskdefs, [], inp)


def _golden_run(name: str, requeue_after: float | None = None) -> list[Step]:
    definition, taskdefs, script, inp = CASES[name]
    return _run([definition], taskdefs, script, inp, requeue_after)


def _golden_file(name: str) -> list[Step]:
    lines = (GOLDEN / f"{name}.events.jsonl").read_bytes().splitlines()
    definitions, taskdefs = _media()
    return _history([decode_event(line) for line in lines], Parity(definitions, taskdefs))


def _conductor(name: str) -> list[Step]:
    folder = CONDUCTOR / name
    main = _json(folder / "workflow.json")
    others = [
        _json(p)
        for p in sorted(folder.glob("*.json"))
        if p.name.startswith(("subworkflow_", "failureworkflow_"))
    ]
    return _run(
        [main, *others],
        _json(folder / "taskdefs.json", []),
        _json(folder / "script.json", []),
        _json(folder / "input.json", {}),
    )


CHILD_WAITS = workflow(task("hold", type_="WAIT"), name="waits")


def _canceled_child() -> list[Step]:
    """A fork whose other branch fails for good: the running sub-workflow task is canceled, its
    child terminated, and the child's end reported to the (ended) parent."""
    sub = task("sub", type_="SUB_WORKFLOW", subWorkflowParam={"name": "waits"})
    fork = task("fork", type_="FORK_JOIN", forkTasks=[[sub], [task("boom")]])
    parent = workflow(fork, task("join", type_="JOIN", joinOn=["sub", "boom"]))
    script = [{"ref": "boom", "status": "FAILED_WITH_TERMINAL_ERROR", "reason": "broken"}]
    return _run([parent, CHILD_WAITS], [], script, {})


def _unknown_children() -> list[Step]:
    """A sub-workflow and a START_WORKFLOW of definitions nobody registered."""
    start = {"startWorkflow": {"name": "ghost", "input": {}}}
    parent = workflow(
        task("go", type_="START_WORKFLOW", inputParameters=start),
        task("sub", type_="SUB_WORKFLOW", subWorkflowParam={"name": "ghost"}),
    )
    return _run([parent], [], [], {})


def _expired_lease() -> list[Step]:
    """A worker that stops heartbeating: the task is queued again (the simulator's worker never
    does that, so this history is driven by hand)."""
    d = Driver(workflow(task("a"), timeoutSeconds=60))
    d.report("a", "STARTED")
    t = d.latest("a")
    d.send(c.ExpireLease("exp-1", "wf-1", task_id=t.task_id, lease_epoch=t.lease_epoch))
    d.report("a")
    return _history(d.events, Parity([]))


def _requeued() -> list[Step]:
    """The reconciler (ADR 15): a task whose ready record was lost is requeued when its
    requeue timer fires, then leased, expired, queued again and completed."""
    d = Driver(workflow(task("a")))
    d.advance(60)
    t = d.latest("a")
    d.send(c.FireTimer("requeue-1", "wf-1", kind="requeue", task_id=t.task_id))
    d.report("a", "STARTED")
    d.send(c.ExpireLease("exp-1", "wf-1", task_id=t.task_id, lease_epoch=t.lease_epoch or 1))
    d.report("a")
    return _history(d.events, Parity([], requeue_after=60))


CASES_RUN: dict[str, Callable[[], list[Step]]] = {
    **{f"golden-run:{n}": functools.partial(_golden_run, n) for n in CASES},
    **{f"golden-requeue:{n}": functools.partial(_golden_run, n, 60.0) for n in CASES},
    **{
        f"golden-file:{p.name.removesuffix('.events.jsonl')}": functools.partial(
            _golden_file, p.name.removesuffix(".events.jsonl")
        )
        for p in sorted(GOLDEN.glob("*.events.jsonl"))
    },
    **{
        f"example:{p.stem}": functools.partial(_example, _json(p)["name"])
        for p in sorted((ROOT / "examples").glob("*.json"))
        if p.name != "media_taskdefs.json"
    },
    **{
        f"conductor:{p.name}": functools.partial(_conductor, p.name)
        for p in sorted(CONDUCTOR.iterdir())
        if (p / "workflow.json").exists()
    },
    "canceled-child": _canceled_child,
    "unknown-children": _unknown_children,
    "expired-lease": _expired_lease,
    "requeued": _requeued,
}


@functools.cache
def steps_of(case: str) -> list[Step]:
    return CASES_RUN[case]()


@pytest.mark.parametrize("case", sorted(CASES_RUN))
def test_the_outbox_and_the_simulator_do_the_same_work(case: str) -> None:
    steps = steps_of(case)
    assert steps, f"{case}: no decision was made"
    for i, (runtime, simulated) in enumerate(steps):
        assert runtime == simulated, f"{case}: decision {i} differs"


def _kinds(work: Work) -> str:
    if work[0] == "fire":
        return "retry" if work[1].kind == "retry" else "timer"
    if work[0] == "input":
        return type(work[1]).__name__
    return str(work[0])


def test_the_cases_cover_every_kind_of_effect() -> None:
    seen = {_kinds(w) for case in CASES_RUN for runtime, _ in steps_of(case) for w in runtime}
    assert seen >= {
        "ready",
        "timer",
        "retry",
        "StartWorkflow",
        "TerminateWorkflow",
        "ChildWorkflowEnded",
    }
    requeued = [w for runtime, _ in steps_of("expired-lease") for w in runtime if w[0] == "ready"]
    assert len(requeued) == 2  # scheduled, then queued again after the lease expired
    reconciled = [
        w[0] if w[0] == "ready" else w[1].kind
        for runtime, _ in steps_of("requeued")
        for w in runtime
        if w[0] in ("ready", "fire")
    ]
    # scheduled, requeued by the reconciler, queued again after the expiry: each with its timer
    assert reconciled.count("ready") == 3 and reconciled.count("requeue") == 3


def test_the_examples_and_golden_histories_are_all_covered() -> None:
    examples = {p.stem for p in (ROOT / "examples").glob("*.json")} - {"media_taskdefs"}
    assert {f"example:{n}" for n in examples} <= set(CASES_RUN)
    golden = {p.name.removesuffix(".events.jsonl") for p in GOLDEN.glob("*.events.jsonl")}
    assert {f"golden-file:{n}" for n in golden} <= set(CASES_RUN)
    assert {f"golden-run:{n}" for n in golden} <= set(CASES_RUN)
