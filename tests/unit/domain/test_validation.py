"""Definition checks: each problem class names its task and its fault; real definitions pass."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from es_sched.domain.validation import sub_workflow_cycles, validate_workflow
from testkit import ROOT
from tests.unit.domain.harness import task, workflow

FIXTURES = ROOT / "tests" / "fixtures" / "conductor"
WF_X = "${workflow.input.x}"


def _has(problems: list[str], ref: str, *fault: str) -> bool:
    return any(f"task {ref!r}" in p and all(f in p for f in fault) for p in problems)


def _fork(ref: str, *branches: list[dict[str, Any]]) -> dict[str, Any]:
    return task(ref, type_="FORK_JOIN", forkTasks=list(branches))


def _join(ref: str, *on: str) -> dict[str, Any]:
    return task(ref, type_="JOIN", joinOn=list(on))


def _loop(ref: str, *body: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return task(ref, type_="DO_WHILE", loopCondition="false", loopOver=list(body), **extra)


def _sub(ref: str, name: str) -> dict[str, Any]:
    return task(ref, type_="SUB_WORKFLOW", subWorkflowParam={"name": name, "version": 1})


# -- a valid definition -------------------------------------------------------------------------
def test_a_valid_definition_has_no_problems() -> None:
    doc = workflow(
        task("a", inputParameters={"x": WF_X}),
        task("b", inputParameters={"y": "${a.output.y}", "s": "${a.status}"}),
        outputParameters={"y": "${b.output.y}", "id": "${workflow.workflowId}"},
    )
    assert validate_workflow(doc) == []
    assert validate_workflow(doc, [{"name": "a", "retryCount": 2, "retryLogic": "FIXED"}]) == []


# -- required fields and references -------------------------------------------------------------
def test_missing_workflow_name_and_tasks() -> None:
    assert any("missing required field name" in p for p in validate_workflow({"tasks": []}))
    problems = validate_workflow({"name": "w", "version": 1})
    assert any("workflow 'w'" in p and "missing required field tasks" in p for p in problems)


def test_task_missing_name_or_reference_name() -> None:
    problems = validate_workflow(workflow({"taskReferenceName": "a", "type": "SIMPLE"}))
    assert _has(problems, "a", "missing required field name")
    problems = validate_workflow(workflow({"name": "nameless_ref", "type": "SIMPLE"}))
    assert any(
        "'nameless_ref'" in p and "missing required field taskReferenceName" in p for p in problems
    )


def test_duplicate_reference_name() -> None:
    problems = validate_workflow(workflow(task("a"), task("a", name="other")))
    assert _has(problems, "a", "duplicate taskReferenceName")


def test_duplicate_reference_name_across_a_switch_case_and_a_fork_branch() -> None:
    switch = task(
        "s",
        type_="SWITCH",
        expression="x",
        inputParameters={"x": WF_X},
        decisionCases={"one": [task("dup")]},
    )
    problems = validate_workflow(workflow(switch, _fork("f", [task("dup")]), _join("j", "dup")))
    assert _has(problems, "dup", "duplicate taskReferenceName")


def test_unknown_task_type() -> None:
    assert _has(validate_workflow(workflow(task("a", type_="BOGUS"))), "a", "unknown task type")


def test_expression_pointing_at_an_unknown_task() -> None:
    problems = validate_workflow(workflow(task("a", inputParameters={"x": "${nope.output.y}"})))
    assert _has(problems, "a", "unknown task 'nope'")


def test_expression_pointing_at_an_unknown_workflow_field() -> None:
    doc = workflow(task("a", inputParameters={"x": "${workflow.inptu.x}"}))
    assert _has(validate_workflow(doc), "a", "unknown workflow field", "workflow.inptu.x")


def test_task_reading_its_own_output_is_a_cycle() -> None:
    doc = workflow(task("a", inputParameters={"x": "${a.output.y}"}))
    assert _has(validate_workflow(doc), "a", "its own task", "cycle")


def test_task_reading_a_task_that_runs_after_it() -> None:
    doc = workflow(task("a", inputParameters={"x": "${b.output.y}"}), task("b"))
    assert _has(validate_workflow(doc), "a", "'b'", "does not finish before it runs")


def test_unknown_field_of_a_task() -> None:
    doc = workflow(task("a"), task("b", inputParameters={"x": "${a.outptu.x}"}))
    assert _has(validate_workflow(doc), "b", "unknown field 'outptu'", "'a'")


def test_loop_body_may_read_a_later_body_task_and_the_loop_itself() -> None:
    body = task("a", inputParameters={"prev": "${b.output.y}", "i": "${loop.output.iteration}"})
    assert validate_workflow(workflow(_loop("loop", body, task("b")))) == []


def test_cpewf_task_id_is_allowed() -> None:
    assert validate_workflow(workflow(task("a", inputParameters={"id": "${CPEWF_TASK_ID}"}))) == []


# -- forks and joins ----------------------------------------------------------------------------
def test_fork_join_not_followed_by_join() -> None:
    problems = validate_workflow(workflow(_fork("f", [task("a")]), task("b")))
    assert _has(problems, "f", "must be followed by a JOIN")


def test_join_on_a_task_outside_its_fork() -> None:
    doc = workflow(task("z"), _fork("f", [task("a")]), _join("j", "a", "z"))
    assert _has(validate_workflow(doc), "j", "joinOn 'z'", "outside the fork")


def test_join_on_a_task_that_does_not_exist() -> None:
    doc = workflow(_fork("f", [task("a")]), _join("j", "a", "ghost"))
    assert _has(validate_workflow(doc), "j", "joinOn 'ghost'", "not a task")


def test_join_not_after_a_fork() -> None:
    problems = validate_workflow(workflow(task("a"), _join("j", "a")))
    assert _has(problems, "j", "must come right after a FORK_JOIN")


def test_dynamic_fork_without_params_and_without_join() -> None:
    problems = validate_workflow(workflow(task("d", type_="FORK_JOIN_DYNAMIC"), task("b")))
    assert _has(problems, "d", "needs dynamicForkTasksParam")
    assert _has(problems, "d", "needs dynamicForkTasksInputParamName")
    assert _has(problems, "d", "must be followed by a JOIN")


# -- per task type ------------------------------------------------------------------------------
def test_switch_without_expression_with_unknown_evaluator_and_no_cases() -> None:
    problems = validate_workflow(workflow(task("s", type_="SWITCH", evaluatorType="python")))
    assert _has(problems, "s", "SWITCH needs an expression")
    assert _has(problems, "s", "unknown evaluatorType 'python'")
    assert _has(problems, "s", "needs decisionCases or a defaultCase")


def test_decision_without_case_value_param_or_expression() -> None:
    doc = workflow(task("d", type_="DECISION", decisionCases={"x": [task("a")]}))
    assert _has(validate_workflow(doc), "d", "DECISION needs caseValueParam or caseExpression")


def test_do_while_without_loop_over_or_condition() -> None:
    problems = validate_workflow(workflow(task("l", type_="DO_WHILE")))
    assert _has(problems, "l", "non-empty loopOver")
    assert _has(problems, "l", "needs a loopCondition")


def test_nested_do_while() -> None:
    doc = workflow(_loop("outer", _loop("inner", task("a"))))
    problems = validate_workflow(doc)
    assert _has(problems, "inner", "cannot be nested inside another DO_WHILE")
    assert not _has(problems, "outer", "nested")


@pytest.mark.parametrize(
    ("params", "fault"),
    [
        ({"evaluatorType": "javascript"}, "INLINE needs inputParameters.expression"),
        ({"evaluatorType": "python", "expression": "1"}, "evaluatorType 'javascript' or"),
    ],
    ids=["no-expression", "bad-evaluator"],
)
def test_inline(params: dict[str, Any], fault: str) -> None:
    assert _has(
        validate_workflow(workflow(task("i", type_="INLINE", inputParameters=params))), "i", fault
    )


def test_terminate_with_a_bad_status() -> None:
    doc = workflow(task("t", type_="TERMINATE", inputParameters={"terminationStatus": "DONE"}))
    assert _has(validate_workflow(doc), "t", "terminationStatus COMPLETED, FAILED or TERMINATED")


@pytest.mark.parametrize(
    ("params", "fault"),
    [
        ({"duration": "soon"}, "cannot read duration 'soon'"),
        ({"until": "next tuesday"}, "cannot read time 'next tuesday'"),
    ],
    ids=["duration", "until"],
)
def test_wait_with_unreadable_time(params: dict[str, str], fault: str) -> None:
    assert _has(
        validate_workflow(workflow(task("w", type_="WAIT", inputParameters=params))), "w", fault
    )


def test_wait_with_readable_times_is_valid() -> None:
    doc = workflow(
        task("w1", type_="WAIT", inputParameters={"duration": "1h 30m"}),
        task("w2", type_="WAIT", inputParameters={"until": "2026-11-29 14:00 UTC"}),
        task("w3", type_="WAIT", inputParameters={"duration": "${workflow.input.d}"}),
    )
    assert validate_workflow(doc) == []


def test_sub_workflow_without_name() -> None:
    doc = workflow(task("s", type_="SUB_WORKFLOW", subWorkflowParam={"version": 1}))
    assert _has(validate_workflow(doc), "s", "SUB_WORKFLOW needs subWorkflowParam.name")


def test_sub_workflow_starting_its_own_workflow() -> None:
    problems = validate_workflow(workflow(_sub("s", "wf"), name="wf"))
    assert _has(problems, "s", "starts its own workflow 'wf'", "cycle")


def test_start_workflow_without_name() -> None:
    doc = workflow(task("s", type_="START_WORKFLOW", inputParameters={"startWorkflow": {}}))
    assert _has(validate_workflow(doc), "s", "START_WORKFLOW needs inputParameters.startWorkflow")


def test_callback_nested_in_a_fork() -> None:
    doc = workflow(_fork("f", [task("cb", type_="CALLBACK")]), _join("j", "cb"))
    assert _has(validate_workflow(doc), "cb", "CALLBACK", "top-level task list")


# -- retry, timeout and placement settings ------------------------------------------------------
BAD_SETTINGS: list[tuple[str, Any, str]] = [
    ("retryLogic", "RANDOM", "retryLogic must be one of"),
    ("retryCount", -1, "retryCount must be a non-negative number"),
    ("priority", 9, "priority must be an integer 0-8"),
    ("retryJitter", 2, "retryJitter must be between 0 and 1"),
    ("timeoutPolicy", "NEVER", "timeoutPolicy must be one of"),
]


@pytest.mark.parametrize(("key", "value", "fault"), BAD_SETTINGS, ids=[b[0] for b in BAD_SETTINGS])
def test_bad_setting_on_a_task(key: str, value: Any, fault: str) -> None:
    assert _has(validate_workflow(workflow(task("a", **{key: value}))), "a", fault)


@pytest.mark.parametrize(("key", "value", "fault"), BAD_SETTINGS, ids=[b[0] for b in BAD_SETTINGS])
def test_bad_setting_in_a_taskdef(key: str, value: Any, fault: str) -> None:
    problems = validate_workflow(workflow(task("a")), [{"name": "a", key: value}])
    assert any("taskdef 'a'" in p and fault in p for p in problems)


# -- sub-workflow graph -------------------------------------------------------------------------
def test_sub_workflow_cycle_over_two_definitions() -> None:
    a = workflow(_sub("to_b", "B"), name="A")
    b = workflow(_sub("to_a", "A"), name="B")
    cycles = sub_workflow_cycles({"A": a, "B": b})
    assert len(cycles) == 1
    assert "A -> B -> A" in cycles[0]
    assert sub_workflow_cycles({"A": a}) == []
    assert sub_workflow_cycles({"A": a, "B": workflow(task("leaf"), name="B")}) == []


# -- real definitions are accepted unchanged ----------------------------------------------------
def _read(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def _real_definitions() -> list[Any]:
    cases: list[Any] = []
    example_taskdefs: list[Any] = []
    examples = sorted((ROOT / "examples").glob("*.json"))
    for path in examples:
        doc = _read(path)
        if isinstance(doc, list):
            example_taskdefs += doc
    for path in examples:
        doc = _read(path)
        if isinstance(doc, dict) and "tasks" in doc:
            cases.append(pytest.param(doc, example_taskdefs, id=f"examples/{path.name}"))
    for folder in sorted(p for p in FIXTURES.iterdir() if (p / "workflow.json").exists()):
        taskdefs = _read(folder / "taskdefs.json") if (folder / "taskdefs.json").exists() else []
        for path in sorted(folder.glob("*workflow*.json")):
            cases.append(pytest.param(_read(path), taskdefs, id=f"{folder.name}/{path.name}"))
    return cases


REAL = _real_definitions()


def test_real_definitions_were_found() -> None:
    ids = {p.id for p in REAL}
    assert {
        "examples/media_pipeline.json",
        "examples/editorial_review.json",
        "examples/clip_highlights.json",
    } <= ids
    assert sum(i.endswith("/workflow.json") for i in ids if i) >= 12


@pytest.mark.parametrize(("doc", "taskdefs"), REAL)
def test_real_definition_is_valid(doc: dict[str, Any], taskdefs: list[Any]) -> None:
    assert validate_workflow(doc, taskdefs) == []


def test_unknown_refs_are_only_excused_after_a_dynamic_fork() -> None:
    dyn = task(
        "dyn",
        type_="FORK_JOIN_DYNAMIC",
        dynamicForkTasksParam="t",
        dynamicForkTasksInputParamName="i",
        inputParameters={"t": "${workflow.input.t}", "i": "${workflow.input.i}"},
    )
    doc = workflow(
        task("before", inputParameters={"x": "${ghots.output.x}"}),
        dyn,
        task("join", type_="JOIN"),
        task("after", inputParameters={"x": "${forked_7.output.x}"}),
    )
    problems = validate_workflow(doc)
    assert _has(problems, "before", "unknown task 'ghots'")
    assert not any("forked_7" in p for p in problems)


def test_inline_task_definition_settings_and_boolean_priority_are_checked() -> None:
    doc = workflow(
        task("a", taskDefinition={"retryLogic": "SOMETIMES"}),
        task("b", priority=True),
        task("c", retryJitter=True),
    )
    problems = validate_workflow(doc)
    assert _has(problems, "a", "taskDefinition retryLogic")
    assert _has(problems, "b", "priority")
    assert _has(problems, "c", "retryJitter")
