"""Conductor conformance: definitions from Conductor's own integration tests, run through the
simulator, must end as Conductor's specs assert (tests/fixtures/conductor/README.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from es_sched.scripting.quickjs import QuickJsEngine
from es_sched.simulate import Simulation
from testkit import ROOT

FIXTURES = ROOT / "tests" / "fixtures" / "conductor"
CASES = sorted(p.name for p in FIXTURES.iterdir() if (p / "expected.json").exists())
FAILED_STATUSES = {"FAILED", "FAILED_WITH_TERMINAL_ERROR", "TIMED_OUT"}


def _read(path: Path, default: Any = None) -> Any:
    return json.loads(path.read_text()) if path.exists() else default


def _subset(actual: Any, expected: Any) -> bool:
    if isinstance(expected, dict):
        return isinstance(actual, dict) and all(
            k in actual and _subset(actual[k], v) for k, v in expected.items()
        )
    return bool(actual == expected)


def _check_tasks(actual: list[dict[str, Any]], expected: list[dict[str, Any]], where: str) -> None:
    got = [(t["taskReferenceName"], t["taskType"], t["status"]) for t in actual]
    want = [(t["taskReferenceName"], t["taskType"], t["status"]) for t in expected]
    assert got == want, f"{where}: task list differs"
    for a, e in zip(actual, expected, strict=True):
        for key in ("input", "output"):
            if key in e:
                assert _subset(a[key], e[key]), f"{where}: {e['taskReferenceName']} {key}"


def _check_workflow(result: dict[str, Any], expected: dict[str, Any], where: str) -> None:
    assert result["status"] == expected["status"], f"{where}: {result.get('reasonForIncompletion')}"
    if "name" in expected:
        assert result["name"] == expected["name"]
    if "tasks" in expected:
        _check_tasks(result["tasks"], expected["tasks"], where)
    if "output" in expected:
        if expected.get("output_exact"):
            assert result["output"] == expected["output"], where
        else:
            assert _subset(result["output"], expected["output"]), where
    for key in expected.get("output_has_keys", []):
        assert key in result["output"], f"{where}: output lacks {key}"
    if "reasonForIncompletion_contains" in expected:
        assert expected["reasonForIncompletion_contains"] in result.get("reasonForIncompletion", "")
    if "variables" in expected:
        assert result["variables"] == expected["variables"], where
    if "failedReferenceTaskNames" in expected:
        failed = {t["taskReferenceName"] for t in result["tasks"] if t["status"] in FAILED_STATUSES}
        assert failed == set(expected["failedReferenceTaskNames"]), where
    if "input" in expected:
        assert _subset(result["input"], expected["input"]), f"{where}: input"
    for key in expected.get("input_has_keys", []):
        assert key in result["input"], f"{where}: input lacks {key}"


@pytest.mark.parametrize("case", CASES)
def test_conductor_fixture(case: str) -> None:
    folder = FIXTURES / case
    main = _read(folder / "workflow.json")
    others = [
        _read(p)
        for p in sorted(folder.glob("*.json"))
        if p.name.startswith(("subworkflow_", "failureworkflow_"))
    ]
    sim = Simulation(
        [main, *others],
        _read(folder / "taskdefs.json", []),
        _read(folder / "script.json", []),
        scripts=QuickJsEngine(),
    )
    result = sim.run(main, _read(folder / "input.json", {}), detail=True)
    expected = _read(folder / "expected.json")
    _check_workflow(result, expected, case)
    for i, sub in enumerate(expected.get("subworkflows", [])):
        child = result["children"][i]
        assert (child["parent_ref"], child["parent_attempt"]) == (
            sub["parent_ref"],
            sub["parent_attempt"],
        )
        _check_workflow(child, sub, f"{case} child {i}")
    if "failure_workflow" in expected:
        assert "failureWorkflow" in result, f"{case}: no failure workflow ran"
        _check_workflow(
            result["failureWorkflow"], expected["failure_workflow"], f"{case} failureWorkflow"
        )
