"""Child versions pinned when the parent starts (``domain.pins``, ADR 0012): a registry that
changes while a parent runs changes nothing for that parent; new parents see the change."""

from __future__ import annotations

from typing import Any

from es_sched.commands.prepare import resolve
from es_sched.domain import commands as c
from es_sched.domain.decide import decide
from es_sched.domain.effects import StartChild, child_input, effects
from es_sched.domain.events import Event
from es_sched.domain.evolve import fold
from es_sched.domain.ids import counter_ids
from es_sched.domain.pins import ChildRef, Found, complete_start, static_refs, taskdefs_used
from es_sched.domain.state import WorkflowState
from es_sched.serialization.snapshots import (
    decode_bundle,
    decode_state,
    definition_record,
    encode_state,
)
from es_sched.simulate import Simulation
from tests.unit.domain.harness import SCRIPTS, T0, task, workflow

JSON = dict[str, Any]
CHILD_V1 = workflow(task("v1_step", name="child.v1"), name="child")
CHILD_V2 = {**workflow(task("v2_step", name="child.v2"), name="child"), "version": 2}
TD_V1 = {"name": "child.v1", "retryCount": 0}
TD_V1_LATER = {"name": "child.v1", "retryCount": 7}


class Registry:
    """A definitions registry that can change between a parent's start and its child's."""

    def __init__(self, *docs: JSON, taskdefs: tuple[JSON, ...] = ()) -> None:
        self.docs = list(docs)
        self.taskdefs = {str(td["name"]): td for td in taskdefs}
        self.asked: list[tuple[str, int | None]] = []

    def push(self, *docs: JSON, taskdefs: tuple[JSON, ...] = ()) -> None:
        self.docs += docs
        self.taskdefs.update({str(td["name"]): td for td in taskdefs})

    def __call__(self, name: str, version: int | None) -> Found | None:
        self.asked.append((name, version))
        docs = [d for d in self.docs if d["name"] == name]
        if version is not None:
            docs = [d for d in docs if d.get("version", 1) == version]
        if not docs:
            return None
        doc = max(docs, key=lambda d: int(d.get("version", 1)))
        names = {t["name"] for t in doc["tasks"]}
        return doc, [td for n, td in sorted(self.taskdefs.items()) if n in names]


def sub(name: str = "child", ref: str = "sub", **param: Any) -> JSON:
    return task(ref, type_="SUB_WORKFLOW", subWorkflowParam={"name": name, **param})


def start(
    definition: JSON, registry: Registry, wf: str = "wf-1"
) -> tuple[WorkflowState, list[Event]]:
    """The parent started as the decider starts it: completed by ``complete_start``."""
    bare = c.StartWorkflow(f"start-{wf}", wf, name=str(definition["name"]))
    registry.push(definition)
    completed = complete_start(bare, registry)
    assert completed is not None
    events = decide(None, completed, T0, counter_ids("t"), SCRIPTS)
    st = fold(events)
    assert st is not None
    return st, events


def child_start(st: WorkflowState, events: list[Event], registry: Registry) -> c.StartWorkflow:
    (fx,) = [fx for fx in effects(st, events) if isinstance(fx, StartChild)]
    inp = child_input(fx, registry)
    assert isinstance(inp, c.StartWorkflow)
    return inp


# -- what is pinned -------------------------------------------------------------------------
def test_static_refs_are_the_literal_children_anywhere_in_the_definition() -> None:
    literal = {"startWorkflow": {"name": "started", "version": 3}}
    computed = {"startWorkflow": {"name": "${workflow.input.which}"}}
    computed_version = {"startWorkflow": {"name": "x", "version": "${workflow.input.v}"}}
    inline = workflow(sub("deep", ref="deep_sub"), name="inline")
    definition = workflow(
        task(
            "sw",
            type_="SWITCH",
            decisionCases={"a": [sub("in_case", version=2)]},
            defaultCase=[sub("in_default", ref="d")],
        ),
        task("fork", type_="FORK_JOIN", forkTasks=[[sub("in_fork", ref="f")]]),
        task("loop", type_="DO_WHILE", loopOver=[sub("child", ref="l")]),
        task("go", type_="START_WORKFLOW", inputParameters=literal),
        task("dyn", type_="START_WORKFLOW", inputParameters=computed),
        task("dynv", type_="START_WORKFLOW", inputParameters=computed_version),
        task("inl", type_="SUB_WORKFLOW", subWorkflowParam={"workflowDefinition": inline}),
        sub("child"),  # named twice: pinned once
        failureWorkflow="on_failure",
    )
    assert static_refs(definition) == [
        ChildRef("SUB_WORKFLOW", "in_case", 2),
        ChildRef("SUB_WORKFLOW", "in_default", None),
        ChildRef("SUB_WORKFLOW", "in_fork", None),
        ChildRef("SUB_WORKFLOW", "child", None),
        ChildRef("START_WORKFLOW", "started", 3),
        ChildRef("failureWorkflow", "on_failure", None),
        ChildRef("SUB_WORKFLOW", "deep", None),
    ]


def test_a_start_pins_every_child_transitively_with_their_taskdefs() -> None:
    grandchild = workflow(task("g", name="grand.task"), name="grand")
    child = workflow(task("c", name="child.task"), sub("grand", ref="g_sub"), name="child")
    failure = workflow(task("f", name="fail.task"), name="fail")
    parent = workflow(task("p", name="parent.task"), sub(), failureWorkflow="fail")
    names = ("parent.task", "child.task", "grand.task", "fail.task")
    registry = Registry(grandchild, child, failure, taskdefs=tuple({"name": n} for n in names))
    st, _ = start(parent, registry)
    assert {d["name"] for d in st.subworkflow_definitions} == {"child", "grand", "fail"}
    assert sorted(st.taskdefs) == ["child.task", "fail.task", "grand.task", "parent.task"]


def test_a_start_that_carries_pins_keeps_them_and_asks_the_registry_for_nothing() -> None:
    parent = workflow(sub())
    registry = Registry(CHILD_V2)
    carried = c.StartWorkflow(
        "s", "wf-1", name="wf", definition=parent, subworkflow_definitions=[CHILD_V1]
    )
    completed = complete_start(carried, registry)
    assert completed is not None
    assert completed.subworkflow_definitions == [CHILD_V1]
    assert registry.asked == []
    assert complete_start(c.StartWorkflow("s", "wf-2", name="nobody"), registry) is None


def test_a_child_unknown_at_the_start_stays_unpinned_and_is_looked_up_when_it_starts() -> None:
    registry = Registry()
    st, events = start(workflow(task("a"), sub()), registry)
    assert st.subworkflow_definitions == ()
    registry.push(CHILD_V1)
    after, events = finish(st, "a")
    assert child_start(after, events, registry).definition == CHILD_V1


class CliRegistry(Registry):
    """The ``DefinitionRegistry`` surface ``es-sched submit`` resolves against."""

    def workflow(self, name: str, version: int | None = None) -> JSON | None:
        hit = self(name, version)
        return hit[0] if hit is not None else None

    def taskdefs_for(self, definition: JSON) -> list[JSON]:
        names = {t["name"] for t in definition["tasks"]}
        return [td for n, td in sorted(self.taskdefs.items()) if n in names]


def test_submit_pins_what_the_decider_would_and_leaves_unknown_starts_for_later() -> None:
    literal = {"startWorkflow": {"name": "later", "version": 2}}
    parent = workflow(
        task("go", type_="START_WORKFLOW", inputParameters=literal),
        sub(),
        failureWorkflow="on_failure",
    )
    on_failure = workflow(task("f", name="fail.task"), name="on_failure")
    registry = CliRegistry(parent, CHILD_V1, on_failure, taskdefs=(TD_V1, {"name": "fail.task"}))
    resolved = resolve(registry, "wf")
    assert resolved.subworkflow_definitions == [CHILD_V1, on_failure]  # "later" v2: unknown
    assert resolved.taskdefs == [TD_V1, {"name": "fail.task"}]
    decided = complete_start(c.StartWorkflow("s", "wf-1", name="wf"), registry)
    assert decided is not None
    assert decided.subworkflow_definitions == resolved.subworkflow_definitions
    assert decided.taskdefs == resolved.taskdefs


# -- children start with what was pinned ----------------------------------------------------
def test_a_child_pushed_in_version_2_mid_run_starts_at_version_1() -> None:
    registry = Registry(CHILD_V1, taskdefs=(TD_V1,))
    st, _ = start(workflow(task("a"), sub()), registry)
    registry.push(CHILD_V2, taskdefs=(TD_V1_LATER,))  # mid-run: after the parent started
    after, events = finish(st, "a")
    asked = len(registry.asked)
    child = child_start(after, events, registry)
    assert child.definition == CHILD_V1
    assert child.taskdefs == [TD_V1]  # the TaskDef as it was when the parent started
    assert registry.asked[asked:] == []  # the registry is not asked at all
    new_parent, _ = start(workflow(task("a"), sub(), name="wf"), registry, wf="wf-2")
    assert [d["version"] for d in new_parent.subworkflow_definitions] == [2]


def test_pins_survive_the_decider_snapshot_a_restarted_decider_restores() -> None:
    registry = Registry(CHILD_V1, taskdefs=(TD_V1,))
    st, _ = start(workflow(task("a"), sub()), registry)
    digest, bundle = definition_record(st)
    restored = decode_state(encode_state(st), {digest: decode_bundle(digest, bundle)})
    assert restored.subworkflow_definitions == (CHILD_V1,)
    registry.push(CHILD_V2)
    after, events = finish(restored, "a")
    assert child_start(after, events, registry).definition == CHILD_V1


def test_a_child_pinned_at_submit_ignores_a_later_version_in_the_registry() -> None:
    """What ``es-sched submit`` sends (on main too): the child embedded in the start. The
    registry now holds version 2; the child still starts at the embedded version 1."""
    parent = workflow(sub())
    inp = c.StartWorkflow(
        "start-1",
        "wf-1",
        name="wf",
        definition=parent,
        taskdefs=[TD_V1],
        subworkflow_definitions=[CHILD_V1],
    )
    events = decide(None, inp, T0, counter_ids("t"), SCRIPTS)
    st = fold(events)
    assert st is not None
    child = child_start(st, events, Registry(CHILD_V1, CHILD_V2))
    assert (child.definition or {}).get("version", 1) == 1
    assert child.taskdefs == [TD_V1]


def test_a_child_carries_its_own_children_pinned_with_it() -> None:
    grand_v1 = workflow(task("g1"), name="grand")
    child = workflow(sub("grand", ref="g_sub"), name="child")
    registry = Registry(child, grand_v1)
    st, events = start(workflow(sub()), registry)
    registry.push({**workflow(task("g2"), name="grand"), "version": 2})
    child_inp = child_start(st, events, registry)
    assert child_inp.subworkflow_definitions == [grand_v1]
    completed = complete_start(child_inp, registry)  # the decider's shell, at the child's start
    assert completed is not None and completed.subworkflow_definitions == [grand_v1]


def test_a_name_computed_from_an_expression_is_looked_up_when_it_starts() -> None:
    """Unless it names a child the parent also names literally: within one parent a name and
    version always mean the one document pinned for them."""
    computed = {"startWorkflow": {"name": "${workflow.input.which}"}}
    parent = workflow(
        task("go", type_="START_WORKFLOW", inputParameters=computed),
        task("go_again", type_="START_WORKFLOW", inputParameters=computed),
        sub(),
    )
    other_v1 = workflow(task("o1"), name="other")
    started: list[c.StartWorkflow] = []
    for i, which in enumerate(["other", "child"]):
        registry = Registry(CHILD_V1, other_v1, parent)
        bare = c.StartWorkflow(f"s{i}", f"wf-{i}", name="wf", input={"which": which})
        completed = complete_start(bare, registry)
        assert completed is not None
        events = decide(None, completed, T0, counter_ids("t"), SCRIPTS)
        st = fold(events)
        assert st is not None and st.subworkflow_definitions == (CHILD_V1,)
        registry.push(CHILD_V2, {**other_v1, "version": 2})  # mid-run
        (first, *_) = [fx for fx in effects(st, events) if isinstance(fx, StartChild)]
        inp = child_input(first, registry)
        assert isinstance(inp, c.StartWorkflow)
        started.append(inp)
    assert [(s.name, (s.definition or {}).get("version", 1)) for s in started] == [
        ("other", 2),  # not known at the start: as the registry is now
        ("child", 1),  # the child the parent names literally, as pinned
    ]


def test_a_history_recorded_before_pins_looks_children_up_as_before() -> None:
    inp = c.StartWorkflow("start-1", "wf-1", name="wf", definition=workflow(sub()))
    events = decide(None, inp, T0, counter_ids("t"), SCRIPTS)
    st = fold(events)
    assert st is not None and st.subworkflow_definitions == ()
    child = child_start(st, events, Registry(CHILD_V1, CHILD_V2))
    assert (child.definition or {})["version"] == 2


# -- the simulator pins the same way --------------------------------------------------------
def test_simulate_keeps_a_running_parents_child_at_the_version_of_its_start() -> None:
    parent = workflow(task("prep"), sub())
    script = [{"ref": "prep", "push": [CHILD_V2]}]
    sim = Simulation([parent, CHILD_V1], [TD_V1], script, scripts=SCRIPTS)
    first = sim.run(parent, {})
    assert [t["taskReferenceName"] for t in first["subworkflows"]["sub"]["tasks"]] == ["v1_step"]
    assert sim.find("child", None) == CHILD_V2  # the push happened, mid-run
    second = sim.run(parent, {})  # a parent started after the push
    assert [t["taskReferenceName"] for t in second["subworkflows"]["sub"]["tasks"]] == ["v2_step"]


def finish(st: WorkflowState, ref: str) -> tuple[WorkflowState, list[Event]]:
    """A worker leases and completes ``ref``: the state after, and the completion's events."""
    t = st.instance(ref)
    assert t is not None
    lease: JSON = {"task_id": t.task_id, "worker_id": "w", "lease_token": "tok"}
    ids = counter_ids(f"{ref}-")
    for inp in (
        c.DispatchTask(f"lease-{ref}", st.workflow_id, **lease),
        c.ReportCompleted(f"done-{ref}", st.workflow_id, **lease),
    ):
        events = decide(st, inp, T0, ids, SCRIPTS)
        after = fold(events, st)
        assert after is not None
        st = after
    return st, events


# -- the TaskDefs a start pins: the registry's answer, and the simulator's -----------------------
INLINE_CHILD = workflow(task("inline_step", name="inline.step"), name="inline_child")
WITH_INLINE = workflow(
    task("first", name="outer.first"),
    task(
        "inline_sub",
        type_="SUB_WORKFLOW",
        subWorkflowParam={
            "name": "inline_child",
            "workflowDefinition": INLINE_CHILD,
        },
    ),
    name="with_inline",
)
TD_INLINE: JSON = {"name": "inline.step", "retryCount": 1, "retryDelaySeconds": 0}
TD_OUTER: JSON = {"name": "outer.first", "retryCount": 0}
TD_UNUSED: JSON = {"name": "nobody.uses", "retryCount": 5}


def test_taskdefs_used_include_an_inline_sub_workflows_tasks_by_name() -> None:
    given = {str(td["name"]): td for td in (TD_UNUSED, TD_OUTER, TD_INLINE)}
    assert taskdefs_used(WITH_INLINE, given) == [TD_INLINE, TD_OUTER]


def test_a_simulated_start_pins_only_the_taskdefs_its_definition_uses() -> None:
    """As the registry answers a real start, whatever else ``defs simulate --taskdefs`` was
    given: the simulated ``workflow.started`` is the one a run on Kafka records."""
    sim = Simulation([WITH_INLINE], [TD_UNUSED, TD_OUTER, TD_INLINE], scripts=SCRIPTS)
    sim.run(WITH_INLINE, {})
    started = sim.workflows["wf-1"].events[0].payload
    assert [td["name"] for td in started.taskdefs] == ["inline.step", "outer.first"]  # type: ignore[attr-defined]


def test_an_inline_sub_workflows_task_retries_by_the_taskdef_its_parent_pinned() -> None:
    script = [
        {"ref": "inline_step", "in_subworkflow_of": "inline_sub", "attempt": 1, "status": "FAILED"}
    ]
    sim = Simulation([WITH_INLINE], [TD_OUTER, TD_INLINE], script, scripts=SCRIPTS)
    result = sim.run(WITH_INLINE, {})
    assert result["status"] == "COMPLETED", result.get("reasonForIncompletion")
    (child,) = result["subworkflows"].values()
    assert [t["attempt"] for t in child["tasks"]] == [1, 2]
