"""Every primitive of a definition runs on the real stack, and its history on Kafka equals
``es-sched defs simulate`` of the same script (``testkit.simulated`` says what is compared).

One system for the module (decider, timer service, retry relay, both projectors, on private
topics) and one scripted worker (``testkit.simulated.ScriptedWorker``) that answers as the
simulator's worker. Every case is started when the system is (they run side by side; the clip
highlights' WAIT of 30 s is the longest); each test then drives its case (signals to its WAIT
tasks), waits for every workflow of it to end, compares the histories with the simulation's,
and ends on the audit's rules over the log. The last test declares the system idle and runs
``es-sched audit check`` with both read models.

Cases: START_WORKFLOW (the started workflow runs too), DO_WHILE (three iterations), INLINE
(javascript), LAMBDA, SET_VARIABLE, DECISION (a case and the default), the TERMINATE task
(COMPLETED and FAILED), ``failureWorkflow`` (its input), an inline SUB_WORKFLOW whose task
retries by its TaskDef, and the two examples ``editorial_review`` (approved, rejected, no
decision) and ``clip_highlights``.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from es_sched.domain.events import Event, TaskScheduled, WorkflowStartRequested
from testkit import ROOT
from testkit.runtime import (
    Env,
    assert_audit_clean,
    assert_read_models,
    final_status,
    read_events,
    roles,
)
from testkit.simulated import Script, ScriptedWorker, assert_same, family, simulated
from testkit.wait import wait_until

pytestmark = pytest.mark.integration

END_S = 120  # a case's whole run; the longest waits 30 s on a WAIT task


def simple(ref: str, **inputs: Any) -> dict[str, Any]:
    return {
        "name": f"prim.{ref}",
        "taskReferenceName": ref,
        "type": "SIMPLE",
        "inputParameters": inputs,
    }


def workflow(name: str, *tasks: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"name": name, "version": 1, "schemaVersion": 2, "tasks": list(tasks), **extra}


START_PARENT = workflow(
    "prim_start_parent",
    {
        "name": "kick",
        "taskReferenceName": "kick",
        "type": "START_WORKFLOW",
        "inputParameters": {
            "startWorkflow": {
                "name": "prim_started",
                "version": 1,
                "input": {"item": "${workflow.input.item}"},
            }
        },
    },
    simple("after_kick", child="${kick.output.workflowId}"),
    outputParameters={"child": "${kick.output.workflowId}"},
)
STARTED = workflow(
    "prim_started",
    simple("child_work", item="${workflow.input.item}"),
    outputParameters={"done": "${child_work.output.done}"},
)
DO_WHILE = workflow(
    "prim_do_while",
    {
        "name": "rounds",
        "taskReferenceName": "rounds",
        "type": "DO_WHILE",
        "inputParameters": {"limit": "${workflow.input.limit}"},
        "loopCondition": "$.rounds['iteration'] < $.limit",
        "loopOver": [simple("step", i="${rounds.output.iteration}")],
    },
    outputParameters={"rounds": "${rounds.output.iteration}", "last": "${step.output.n}"},
)
INLINE = workflow(
    "prim_inline",
    {
        "name": "calc",
        "taskReferenceName": "calc",
        "type": "INLINE",
        "inputParameters": {
            "evaluatorType": "javascript",
            "a": "${workflow.input.a}",
            "b": "${workflow.input.b}",
            "expression": "(function () { var s = $.a + $.b;"
            " return {sum: s, big: s > 10, parts: [$.a, $.b]}; })()",
        },
    },
    simple("use_sum", sum="${calc.output.result.sum}"),
    outputParameters={"calc": "${calc.output.result}"},
)
LAMBDA = workflow(
    "prim_lambda",
    {
        "name": "size",
        "taskReferenceName": "size",
        "type": "LAMBDA",
        "inputParameters": {
            "x": "${workflow.input.x}",
            "scriptExpression": "if ($.x > 2) { return {size: 'large', x: $.x}; }"
            " return {size: 'small', x: $.x};",
        },
    },
    simple("use_size", size="${size.output.result.size}"),
    outputParameters={"size": "${size.output.result}"},
)
SET_VARIABLE = workflow(
    "prim_set_variable",
    {
        "name": "set_stage",
        "taskReferenceName": "set_stage",
        "type": "SET_VARIABLE",
        "inputParameters": {"stage": "${workflow.input.stage}", "count": 1},
    },
    simple("read_stage", stage="${workflow.variables.stage}"),
    {
        "name": "set_count",
        "taskReferenceName": "set_count",
        "type": "SET_VARIABLE",
        "inputParameters": {"count": "${read_stage.output.count}"},
    },
    outputParameters={
        "stage": "${workflow.variables.stage}",
        "count": "${workflow.variables.count}",
    },
)
DECISION = workflow(
    "prim_decision",
    {
        "name": "route",
        "taskReferenceName": "route",
        "type": "DECISION",
        "caseValueParam": "kind",
        "inputParameters": {"kind": "${workflow.input.kind}"},
        "decisionCases": {
            "video": [simple("video_path")],
            "audio": [simple("audio_path")],
        },
        "defaultCase": [simple("other_path", kind="${workflow.input.kind}")],
    },
    simple("after_route", picked="${route.output.caseOutput}"),
)
TERMINATE_COMPLETED = workflow(
    "prim_terminate_completed",
    simple("before_stop"),
    {
        "name": "stop_ok",
        "taskReferenceName": "stop_ok",
        "type": "TERMINATE",
        "inputParameters": {
            "terminationStatus": "COMPLETED",
            "workflowOutput": {"v": "${before_stop.output.v}"},
        },
    },
    simple("never_ok"),
)
TERMINATE_FAILED = workflow(
    "prim_terminate_failed",
    simple("before_fail"),
    {
        "name": "stop_failed",
        "taskReferenceName": "stop_failed",
        "type": "TERMINATE",
        "inputParameters": {
            "terminationStatus": "FAILED",
            "terminationReason": "stopped: ${workflow.input.why}",
        },
    },
    simple("never_failed"),
)
FAILING = workflow(
    "prim_failing",
    simple("doomed", asset="${workflow.input.asset}"),
    failureWorkflow="prim_on_failure",
)
ON_FAILURE = workflow(
    "prim_on_failure",
    simple(
        "clean_up",
        failed="${workflow.input.workflowId}",
        reason="${workflow.input.reason}",
        asset="${workflow.input.asset}",
    ),
    outputParameters={"cleaned": "${workflow.input.failedWorkflow.workflowType}"},
)
INLINE_CHILD = workflow("prim_inline_child", simple("inline_step", n="${workflow.input.n}"))
INLINE_SUB = workflow(
    "prim_inline_sub",
    {
        "name": "inline_sub",
        "taskReferenceName": "inline_sub",
        "type": "SUB_WORKFLOW",
        "inputParameters": {"n": 3},
        "subWorkflowParam": {"name": "prim_inline_child", "workflowDefinition": INLINE_CHILD},
    },
)

OURS = [
    START_PARENT,
    STARTED,
    DO_WHILE,
    INLINE,
    LAMBDA,
    SET_VARIABLE,
    DECISION,
    TERMINATE_COMPLETED,
    TERMINATE_FAILED,
    FAILING,
    ON_FAILURE,
    INLINE_SUB,
]


def _refs(tasks: list[dict[str, Any]]) -> Iterator[str]:
    for t in tasks:
        if t["type"] == "SIMPLE":
            yield t["name"]
        for branch in t.get("decisionCases", {}).values():
            yield from _refs(branch)
        yield from _refs(t.get("defaultCase", []))
        yield from _refs(t.get("loopOver", []))
        yield from _refs(
            t.get("subWorkflowParam", {}).get("workflowDefinition", {}).get("tasks", [])
        )


OUR_TASKDEFS = [
    {
        "name": name,
        # The inline sub-workflow's task retries once, from its TaskDef: pinned at the start.
        "retryCount": 1 if name == "prim.inline_step" else 0,
        "retryDelaySeconds": 0,
        "timeoutSeconds": 600,
        "responseTimeoutSeconds": 600,
    }
    for name in sorted({n for d in OURS for n in _refs(d["tasks"])})
]


def example(name: str) -> Any:
    return json.loads((ROOT / "examples" / f"{name}.json").read_text())


MEDIA, EDITORIAL, CLIPS = (
    example(n) for n in ("media_pipeline", "editorial_review", "clip_highlights")
)
MEDIA_TASKDEFS: list[dict[str, Any]] = example("media_taskdefs")
# Tasks of the examples that the media TaskDefs do not cover, as a user would register them.
EXAMPLE_TASKDEFS = [
    {"name": n, "retryCount": 0, "timeoutSeconds": 600, "responseTimeoutSeconds": 600}
    for n in ("cms.publish", "media.clip", "cdn.purge", "cdn.purge_status")
]
TASKDEFS = OUR_TASKDEFS + MEDIA_TASKDEFS + EXAMPLE_TASKDEFS
PROBE_720 = {
    "ref": "probe",
    "in_subworkflow_of": "ingest",
    "output": {"height": 720, "duration": 6},
}
EDITORIAL_INPUT = {
    "source_uri": "s3://in/match.mp4",
    "asset_id": "a1",
    "callback_url": "http://cb",
    "desk": "sports",
}
SEGMENTS = [
    {"start": s, "end": s + 10, "score": score}
    for s, score in ((0, 0.5), (10, 0.9), (20, 0.1), (30, 0.7))
]


@dataclass(frozen=True)
class Case:
    definitions: list[dict[str, Any]]  # the one started first, then those it starts
    input: dict[str, Any]
    status: str  # of the workflow started
    script: Script = field(default_factory=list)


CASES = {
    "start_workflow": Case(
        [START_PARENT, STARTED],
        {"item": "box-7"},
        "COMPLETED",
        [{"ref": "child_work", "output": {"done": "box-7 packed"}}],
    ),
    "do_while": Case(
        [DO_WHILE],
        {"limit": 3},
        "COMPLETED",
        [{"ref": f"step__{i}", "output": {"n": i * 10}} for i in (1, 2, 3)],
    ),
    "inline": Case([INLINE], {"a": 4, "b": 9}, "COMPLETED"),
    "lambda": Case([LAMBDA], {"x": 5}, "COMPLETED"),
    "set_variable": Case(
        [SET_VARIABLE],
        {"stage": "encoded"},
        "COMPLETED",
        [{"ref": "read_stage", "output": {"count": 2}}],
    ),
    "decision_case": Case([DECISION], {"kind": "video"}, "COMPLETED"),
    "decision_default": Case([DECISION], {"kind": "podcast"}, "COMPLETED"),
    "terminate_completed": Case(
        [TERMINATE_COMPLETED], {}, "COMPLETED", [{"ref": "before_stop", "output": {"v": 42}}]
    ),
    "terminate_failed": Case([TERMINATE_FAILED], {"why": "no rights"}, "FAILED"),
    "failure_workflow": Case(
        [FAILING, ON_FAILURE],
        {"asset": "a9"},
        "FAILED",
        [{"ref": "doomed", "status": "FAILED", "reason": "disk full"}],
    ),
    "inline_sub_workflow": Case(
        [INLINE_SUB],
        {},
        "COMPLETED",
        [
            {
                "ref": "inline_step",
                "in_subworkflow_of": "inline_sub",
                "attempt": 1,
                "status": "FAILED",
            },
            {"ref": "inline_step", "in_subworkflow_of": "inline_sub", "attempt": 2},
        ],
    ),
    "editorial_approved": Case(
        [EDITORIAL, MEDIA],
        EDITORIAL_INPUT,
        "COMPLETED",
        [
            PROBE_720,
            {
                "external": True,
                "ref": "review",
                "output": {"decision": "approve", "editor": "ana", "headline": "H"},
            },
            {"ref": "publish", "output": {"url": "https://cms/a1"}},
        ],
    ),
    "editorial_rejected": Case(
        [EDITORIAL, MEDIA],
        EDITORIAL_INPUT,
        "TERMINATED",
        [
            PROBE_720,
            {"external": True, "ref": "review", "output": {"decision": "reject", "note": "blurry"}},
        ],
    ),
    "editorial_undecided": Case(
        [EDITORIAL, MEDIA],
        EDITORIAL_INPUT,
        "FAILED",
        [PROBE_720, {"external": True, "ref": "review", "output": {"editor": "ana"}}],
    ),
    "clip_highlights": Case(
        [CLIPS],
        {"source_uri": "s3://in/match.mp4", "segments": SEGMENTS, "top": 3},
        "COMPLETED",
        [
            {"ref": "purge", "output": {"purge_id": "p1"}},
            {"ref": "purge_status__1", "output": {"state": "done"}},
        ],
    ),
}


@dataclass
class System:
    env: Env
    started: dict[str, str]  # case -> workflow id
    runs: dict[str, list[list[Event]]] = field(default_factory=dict)  # case -> its histories


@pytest.fixture(scope="module")
def system() -> Iterator[System]:
    env = Env()
    env.create()
    with tempfile.TemporaryDirectory() as folder:  # one push, as a user pushes a folder's file
        path = Path(folder) / "definitions.json"
        path.write_text(json.dumps([*OURS, MEDIA, EDITORIAL, CLIPS, *TASKDEFS]))
        env.push_files(path)
    with (
        roles(env, "decider", "timers", "retry", "projector-pg", "projector-search"),
        ScriptedWorker(env) as worker,
    ):
        for case in CASES.values():
            worker.add(case.script)
        started = {
            name: env.submit(case.definitions[0]["name"], [case.input])[0].workflow_id
            for name, case in CASES.items()
        }
        yield System(env, started)


def waiting_on(events: list[Event], ref: str) -> bool:
    """Whether a WAIT task ``ref`` of this history is scheduled and not yet done."""
    ids = {
        e.payload.task_id
        for e in events
        if isinstance(e.payload, TaskScheduled) and e.payload.ref == ref
    }
    done = {getattr(e.payload, "task_id", None) for e in events if e.type == "task.completed"}
    return bool(ids - done)


def ended(histories: list[list[Event]]) -> bool:
    """Every workflow of the family has a history, and each of them ended."""
    started = {
        e.payload.child_workflow_id
        for h in histories
        for e in h
        if isinstance(e.payload, WorkflowStartRequested)
    }
    return len(histories) == len(started) + 1 and all(
        final_status(h) != "RUNNING" for h in histories
    )


def run_case(system: System, name: str) -> list[list[Event]]:
    """Drive case ``name`` (its signals, when its WAIT task waits) and return its histories
    once every workflow of it ended; once, the same histories after."""
    if name in system.runs:
        return system.runs[name]
    env, root, case = system.env, system.started[name], CASES[name]
    for entry in (e for e in case.script if e.get("external")):
        ref = str(entry["ref"])

        def waiting(ref: str = ref) -> bool:
            return waiting_on(read_events(env).get(root, []), ref)

        wait_until(waiting, END_S, f"{name}: WAIT {ref} waiting")
        with env.client() as client:
            client.signal(root, entry.get("output") or {}, ref=ref)
    wait_until(lambda: ended(family(read_events(env), root)), END_S, f"{name}: every run ended")
    system.runs[name] = family(read_events(env), root)
    return system.runs[name]


@pytest.mark.parametrize("name", list(CASES))
def test_history_on_kafka_equals_defs_simulate(system: System, name: str) -> None:
    case = CASES[name]
    histories = run_case(system, name)
    assert final_status(histories[0]) == case.status
    assert_same(histories, simulated(case.definitions, TASKDEFS, case.script, case.input))
    assert_audit_clean(system.env)


def output_of(history: list[Event]) -> dict[str, Any]:
    last = history[-1].payload
    return dict(getattr(last, "output", {}))


def test_what_the_primitives_did(system: System) -> None:
    """The facts each primitive is there for, read from the Kafka histories (the equality
    above would also hold if both sides were wrong the same way)."""
    runs = {name: run_case(system, name) for name in CASES}
    parent, child = runs["start_workflow"]
    assert output_of(parent)["child"] == child[0].workflow_id
    assert output_of(child) == {"done": "box-7 packed"}
    assert output_of(runs["do_while"][0]) == {"rounds": 3, "last": 30}
    assert output_of(runs["inline"][0])["calc"] == {"sum": 13, "big": True, "parts": [4, 9]}
    assert output_of(runs["lambda"][0])["size"] == {"size": "large", "x": 5}
    assert output_of(runs["set_variable"][0]) == {"stage": "encoded", "count": 2}
    for name, ran in (("decision_case", "video_path"), ("decision_default", "other_path")):
        refs = {e.payload.ref for e in runs[name][0] if isinstance(e.payload, TaskScheduled)}
        assert ran in refs and not {"video_path", "audio_path", "other_path"} - {ran} & refs
    stopped = runs["terminate_completed"][0]
    assert output_of(stopped) == {"v": 42}
    assert not any(getattr(e.payload, "ref", "") == "never_ok" for e in stopped)
    failed = runs["terminate_failed"][0][-1].payload
    assert getattr(failed, "reason", "") == "stopped: no rights"
    failing, on_failure = runs["failure_workflow"]
    asked = on_failure[0].payload
    assert getattr(asked, "input", {})["workflowId"] == failing[0].workflow_id
    assert getattr(asked, "input", {})["reason"].endswith("disk full")
    assert output_of(on_failure) == {"cleaned": "prim_failing"}
    assert output_of(runs["editorial_approved"][0])["approved_by"] == "ana"
    assert output_of(runs["editorial_rejected"][0]) == {"note": "blurry"}
    assert output_of(runs["clip_highlights"][0])["purge_rounds"] == 1


def test_the_log_and_both_read_models_pass_the_audit(system: System) -> None:
    """Once every case ended: ``es-sched audit check --idle`` with the read models."""
    assert_read_models(system.env, sum(len(run_case(system, n)) for n in CASES))
