"""The command side's checks without a broker: schema and size cap, definition resolution,
definition problems, final-event recognition, a command's outcome, JSONL inputs and the CLI's
refusals."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import pytest
from click.testing import CliRunner

from es_sched.cli.commands import read_jsonl, submit
from es_sched.commands import UnknownDefinition, definition_problems, files, prepare, resolve
from es_sched.commands.prepare import Outcome, awaited_final, caused_by, terminal_status
from es_sched.domain import commands as c
from es_sched.domain.events import (
    CommandRejected,
    Event,
    WorkflowCompleted,
    WorkflowEnded,
    WorkflowEnding,
    WorkflowPaused,
    WorkflowRejected,
)
from es_sched.errors import SchemaError
from es_sched.serialization import SchemaCatalog, decode_input, encode_event
from testkit import ROOT

MEDIA = [ROOT / "examples/media_pipeline.json", ROOT / "examples/media_taskdefs.json"]
CAP = 256 * 1024
CATALOG = SchemaCatalog()
JSON = dict[str, Any]


def start(**changes: Any) -> c.StartWorkflow:
    fields: JSON = {
        "input_id": "cmd-1",
        "workflow_id": "wf-1",
        "name": "flow",
        "input": {"x": 1},
        "definition": {"name": "flow", "version": 1, "tasks": []},
        "taskdefs": [{"name": "t"}],
    }
    return c.StartWorkflow(**{**fields, **changes})


# -- prepare: schema and size cap -----------------------------------------------------------------
def test_a_valid_command_is_encoded_and_decodes_to_itself() -> None:
    cmd = start(priority=0, tenant="acme", correlation_id="batch-1")
    assert decode_input(prepare(cmd, CATALOG, CAP)) == cmd


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"priority": 9}, "priority: 9 is greater than the maximum of 8"),
        ({"priority": -1}, "priority: -1 is less than the minimum of 0"),
        ({"input": [1, 2]}, "input: [1, 2] is not of type 'object'"),
        ({"input": "text"}, "input: 'text' is not of type 'object'"),
        ({"version": 0}, "version: 0 is less than the minimum of 1"),
        ({"tenant": ""}, "tenant: '' should be non-empty"),
        ({"input_id": "x" * 201}, "input_id:"),
        ({"workflow_id": ""}, "workflow_id: '' should be non-empty"),
        ({"taskdefs": [{"retryCount": 1}]}, "'name' is a required property"),
    ],
)
def test_an_invalid_start_is_refused_with_the_schema_error(changes: JSON, message: str) -> None:
    with pytest.raises(SchemaError) as caught:
        prepare(start(**changes), CATALOG, CAP)
    assert str(caught.value).startswith("workflow.start: ")
    assert message in str(caught.value)


@pytest.mark.parametrize(
    "cmd",
    [
        c.CancelWorkflow("c1", "wf", expected_version=3, reason="user asked"),
        c.TerminateWorkflow("c2", "wf"),
        c.RetryWorkflow("c3", "wf"),
        c.PauseWorkflow("c4", "wf", expected_version=0),
        c.ResumeWorkflow("c5", "wf"),
        c.SignalWorkflow("c6", "wf", ref="review", status="FAILED", output={"a": [1]}),
    ],
)
def test_every_control_command_passes_its_schema(cmd: c.Command) -> None:
    assert decode_input(prepare(cmd, CATALOG, CAP)) == cmd


@pytest.mark.parametrize(
    ("cmd", "message"),
    [
        (c.SignalWorkflow("c", "wf", status="MAYBE"), "status: 'MAYBE' is not one of"),
        (c.SignalWorkflow("c", "wf", output=cast(JSON, [1])), "output: [1] is not of type"),
        (c.CancelWorkflow("c", "wf", expected_version=-1), "expected_version: -1"),
        (c.PauseWorkflow("", "wf"), "input_id: '' should be non-empty"),
        (c.CancelWorkflow("c", "wf", reason="r" * 2001), "reason:"),
    ],
)
def test_an_invalid_control_command_is_refused(cmd: c.Command, message: str) -> None:
    with pytest.raises(SchemaError, match=cmd.TYPE.replace(".", r"\.")) as caught:
        prepare(cmd, CATALOG, CAP)
    assert message in str(caught.value)


def test_the_size_cap_is_inclusive_and_names_the_setting() -> None:
    base = len(prepare(start(input={"blob": ""}), CATALOG, CAP))
    exactly = start(input={"blob": "x" * (CAP - base)})
    assert len(prepare(exactly, CATALOG, CAP)) == CAP
    over = start(input={"blob": "x" * (CAP - base + 1)})
    with pytest.raises(SchemaError) as caught:
        prepare(over, CATALOG, CAP)
    assert str(caught.value) == (
        f"workflow.start: record is {CAP + 1} bytes, over the cap of {CAP} bytes "
        "(ES_SCHED_RUN_COMMAND_MAX_BYTES)"
    )


def test_the_cap_counts_the_embedded_definition_too() -> None:
    definition = {"name": "flow", "version": 1, "tasks": [], "description": "d" * 2000}
    with pytest.raises(SchemaError, match="over the cap of 1024 bytes"):
        prepare(start(input={}, definition=definition), CATALOG, 1024)


@pytest.mark.parametrize("value", [{1, 2}, datetime(2026, 1, 1, tzinfo=UTC), float("nan")])
def test_values_json_cannot_hold_are_a_schema_error(value: object) -> None:
    with pytest.raises(SchemaError, match=r"workflow\.start"):
        prepare(start(input={"v": value}), CATALOG, CAP)


# -- resolve: the definition a StartWorkflow embeds -----------------------------------------------
class FakeRegistry:
    def __init__(self, workflows: list[JSON], taskdefs: list[JSON]) -> None:
        self.workflows = {(w["name"], w.get("version", 1)): w for w in workflows}
        self.taskdefs = {td["name"]: td for td in taskdefs}

    def workflow(self, name: str, version: int | None = None) -> JSON | None:
        if version is not None:
            return self.workflows.get((name, version))
        versions = [v for (n, v) in self.workflows if n == name]
        return self.workflows[(name, max(versions))] if versions else None

    def taskdefs_for(self, definition: JSON) -> list[JSON]:
        names = {t["name"] for t in definition["tasks"]}
        return [td for n, td in sorted(self.taskdefs.items()) if n in names]


def flow(name: str, version: int, *tasks: JSON) -> JSON:
    return {"name": name, "version": version, "tasks": list(tasks)}


def simple(name: str) -> JSON:
    return {"name": name, "taskReferenceName": name, "type": "SIMPLE"}


def sub(name: str, version: int | None = None) -> JSON:
    param: JSON = {"name": name} if version is None else {"name": name, "version": version}
    return {
        "name": f"call_{name}",
        "taskReferenceName": f"call_{name}",
        "type": "SUB_WORKFLOW",
        "subWorkflowParam": param,
    }


def test_resolve_takes_the_latest_version_unless_one_is_named() -> None:
    registry = FakeRegistry(
        [flow("f", 1, simple("a")), flow("f", 2, simple("b"))], [{"name": "a"}, {"name": "b"}]
    )
    assert resolve(registry, "f").definition["version"] == 2
    assert resolve(registry, "f").taskdefs == [{"name": "b"}]
    assert resolve(registry, "f", 1).taskdefs == [{"name": "a"}]


def test_an_unknown_definition_names_itself_and_the_push_command() -> None:
    registry = FakeRegistry([flow("f", 1)], [])
    with pytest.raises(UnknownDefinition) as caught:
        resolve(registry, "g")
    assert "'g' (any version)" in str(caught.value)
    assert "es-sched defs push" in str(caught.value)
    with pytest.raises(UnknownDefinition, match="'f' version 3"):
        resolve(registry, "f", 3)


def test_sub_workflows_are_embedded_with_their_taskdefs() -> None:
    nested = {**simple("sw"), "type": "SWITCH", "decisionCases": {"x": [sub("child", 1)]}}
    registry = FakeRegistry(
        [
            flow("parent", 1, simple("a"), nested),
            flow("child", 1, simple("b"), sub("grandchild")),
            flow("grandchild", 4, simple("a"), sub("child", 1)),  # a cycle must not loop
        ],
        [{"name": "a"}, {"name": "b"}, {"name": "unused"}],
    )
    resolved = resolve(registry, "parent")
    assert sorted(d["name"] for d in resolved.subworkflow_definitions) == ["child", "grandchild"]
    assert resolved.taskdefs == [{"name": "a"}, {"name": "b"}]


def test_a_missing_sub_workflow_is_refused_naming_its_parent() -> None:
    registry = FakeRegistry([flow("parent", 1, sub("gone", 2))], [])
    with pytest.raises(UnknownDefinition, match=r"'gone' version 2 \(a SUB_WORKFLOW of 'parent'\)"):
        resolve(registry, "parent")


def test_an_inline_sub_workflow_needs_no_registry() -> None:
    inline = sub("ignored")
    inline["subWorkflowParam"]["workflowDefinition"] = flow("inline", 1, simple("a"))
    assert resolve(FakeRegistry([flow("p", 1, inline)], []), "p").subworkflow_definitions == []


# -- definition problems (what `defs push` refuses) -----------------------------------------------
def test_the_examples_have_no_problems() -> None:
    assert definition_problems(files.load(MEDIA), CATALOG) == []


def test_every_problem_names_its_document(tmp_path: Path) -> None:
    broken = json.loads(MEDIA[0].read_text())
    broken["tasks"][0]["type"] = "NO_SUCH_TYPE"
    (tmp_path / "wf.json").write_text(json.dumps(broken))
    (tmp_path / "td.json").write_text(json.dumps([{"name": "t", "retryCount": -1}]))
    problems = definition_problems(
        files.load([tmp_path / "wf.json", tmp_path / "td.json"]), CATALOG
    )
    assert any(p.startswith("media_pipeline v1 (") and "NO_SUCH_TYPE" in p for p in problems)
    assert any(p.startswith("taskdef t: ") for p in problems)


def test_sub_workflow_cycles_and_empty_files_are_problems(tmp_path: Path) -> None:
    path = tmp_path / "cycle.json"
    path.write_text(json.dumps([flow("a", 1, sub("b")), flow("b", 1, sub("a"))]))
    problems = definition_problems(files.load([path]), CATALOG)
    assert any("SUB_WORKFLOW cycle a -> b -> a" in p for p in problems)
    (tmp_path / "empty.json").write_text("[]")
    assert definition_problems(files.load([tmp_path / "empty.json"]), CATALOG) == [
        "no workflow definition or TaskDef in the given files"
    ]


# -- final events ----------------------------------------------------------------------------------
def event(payload: Any, workflow_id: str = "wf") -> Event:
    return Event(
        "00000000-0000-0000-0000-000000000001",
        workflow_id,
        1,
        datetime(2026, 1, 1, tzinfo=UTC),
        "c",
        "c",
        payload,
    )


def test_terminal_status() -> None:
    assert terminal_status(event(WorkflowCompleted({}))) == "COMPLETED"
    assert terminal_status(event(WorkflowEnded("TIMED_OUT", "slow"))) == "TIMED_OUT"
    assert terminal_status(event(WorkflowPaused())) is None


def test_awaited_final_skips_what_is_not_a_final_event_of_an_awaited_workflow() -> None:
    def raw(type_: str, workflow_id: str = "wf") -> bytes:
        return json.dumps({"type": type_, "workflow_id": workflow_id}).encode()

    assert awaited_final(raw("workflow.completed"), {"wf"}) == "wf"
    assert awaited_final(raw("workflow.ended"), {"wf"}) == "wf"
    assert awaited_final(raw("workflow.paused"), {"wf"}) is None
    assert awaited_final(raw("workflow.completed", "other"), {"wf"}) is None
    for junk in (b"not json", b"[1]", b"", None, b"\xff"):
        assert awaited_final(junk, {"wf"}) is None


def test_a_refused_start_is_final_for_submit_wait_but_a_refused_cancel_is_not() -> None:
    start = WorkflowRejected("c", "workflow.start", "no definition", name="n")
    assert terminal_status(event(start)) == "REJECTED"
    assert terminal_status(event(WorkflowRejected("c", "workflow.cancel", "unknown"))) is None


def test_the_outcome_of_a_command_is_its_rejection_or_its_events() -> None:
    refused = Outcome("c", (event(CommandRejected("c", "workflow.resume", "workflow is RUNNING")),))
    assert refused.rejection == "workflow is RUNNING"
    unknown = Outcome("c", (event(WorkflowRejected("c", "workflow.cancel", "unknown 'x'")),))
    assert unknown.rejection == "unknown 'x'"
    accepted = Outcome(
        "c", (event(WorkflowEnding("CANCELED", "operator")), event(WorkflowEnded("CANCELED", "")))
    )
    assert accepted.rejection is None
    assert accepted.describe() == "workflow.ending CANCELED (operator), workflow.ended CANCELED"
    assert Outcome("c", (event(WorkflowPaused()),)).describe() == "workflow.paused"


def test_caused_by_picks_the_records_that_may_carry_a_command_id_without_decoding() -> None:
    mine = encode_event(event(WorkflowPaused()))  # causation_id "c"
    assert caused_by(mine, "c") and not caused_by(mine, "other") and not caused_by(None, "c")
    quoted = Event(
        "00000000-0000-0000-0000-000000000001",
        "wf",
        1,
        datetime(2026, 1, 1, tzinfo=UTC),
        'id "é"',
        "c",
        WorkflowPaused(),
    )
    assert caused_by(encode_event(quoted), 'id "é"')


# -- JSONL inputs and the CLI's refusals (no Kafka is reached) -------------------------------------
def test_read_jsonl_skips_blank_lines_and_keeps_line_numbers() -> None:
    text = '{"a": 1}\n\n   \n{"a": 2}\n'
    assert read_jsonl(text, "in.jsonl") == [(1, {"a": 1}), (4, {"a": 2})]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"a": 1}\n{oops}\n', "in.jsonl:2 is not JSON"),
        ('{"a": 1}\n\n[1, 2]\n', "in.jsonl:3 must be a JSON object, got list"),
        ("\n\n", "in.jsonl: no input lines"),
    ],
)
def test_read_jsonl_names_the_bad_line(text: str, message: str) -> None:
    with pytest.raises(SchemaError, match=message):
        read_jsonl(text, "in.jsonl")


def test_submit_needs_exactly_one_input_source(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_text("{}\n")
    for args in ([], ["--input", "{}", "--input-file", str(path)]):
        result = CliRunner().invoke(submit, ["flow", *args])
        assert result.exit_code == 2
        assert "exactly one of --input and --input-file" in result.output


def test_submit_refuses_a_bad_line_before_connecting(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_text('{"a": 1}\nnope\n')
    result = CliRunner().invoke(submit, ["flow", "--input-file", str(path)])
    assert isinstance(result.exception, SchemaError)
    assert f"{path}:2 is not JSON" in str(result.exception)
    result = CliRunner().invoke(submit, ["flow", "--input", "[1]"])
    assert isinstance(result.exception, SchemaError)
    assert "--input must be a JSON object, got list" in str(result.exception)
