"""The JSON Schema catalogue in ``schemas/``: one schema per registered type and version, each a
draft 2020-12 schema with a valid example that round-trips; decoding refuses what they refuse."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from es_sched.domain.commands import INPUT_TYPES
from es_sched.domain.definitions import TASK_TYPES
from es_sched.domain.events import EVENT_TYPES, TaskScheduled
from es_sched.domain.validation import validate_workflow
from es_sched.errors import SchemaError
from es_sched.serialization import (
    SchemaCatalog,
    decode_event,
    decode_input,
    encode_event,
    encode_input,
    event_from_dict,
    event_to_dict,
    input_from_dict,
    input_to_dict,
    schema_dir,
)
from es_sched.serialization.upcasters import UPCASTERS

ROOT = schema_dir()
EXAMPLES = ROOT / "examples"
DRAFT = "https://json-schema.org/draft/2020-12/schema"
FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "conductor"
REGISTRIES: dict[str, dict[str, Any]] = {"events": EVENT_TYPES, "commands": INPUT_TYPES}

Doc = dict[str, Any]


def _files(root: Path, *, skip_examples: bool = False) -> list[str]:
    return sorted(
        p.relative_to(root).as_posix()
        for p in root.rglob("*.json")
        if not (skip_examples and p.relative_to(root).parts[0] == "examples")
    )


def _load(path: Path) -> Any:
    return json.loads(path.read_text())


def _example(rel: str = "events/task.completed.v1.json") -> Doc:
    return dict(_load(EXAMPLES / rel))


def _kind(rel: str) -> str:
    return rel.partition("/")[0]


def _type_and_version(rel: str) -> tuple[str, str, int]:
    kind, name = rel.split("/")
    type_, version = name.removesuffix(".json").rsplit(".v", 1)
    return kind, type_, int(version)


SCHEMAS = _files(ROOT, skip_examples=True)
EXAMPLE_FILES = _files(EXAMPLES)
TYPED_SCHEMAS = [rel for rel in SCHEMAS if _kind(rel) in REGISTRIES]
CURRENT = {
    kind: [f"{kind}/{t}.v{cls.SCHEMA_VERSION}.json" for t, cls in sorted(registry.items())]
    for kind, registry in REGISTRIES.items()
}
CONDUCTOR_DEFINITIONS = sorted(
    p.relative_to(FIXTURES).as_posix()
    for p in FIXTURES.glob("*/*.json")
    if p.name == "workflow.json" or p.name.startswith(("subworkflow_", "failureworkflow_"))
)


# -- completeness -----------------------------------------------------------------------------
@pytest.mark.parametrize("kind", sorted(REGISTRIES))
def test_every_registered_type_has_a_schema_at_its_current_version(kind: str) -> None:
    catalog = SchemaCatalog()
    registry = REGISTRIES[kind]
    have = {t for t, cls in registry.items() if catalog.path(kind, t, cls.SCHEMA_VERSION).exists()}
    assert have == set(registry)


def test_catalog_lists_the_registered_event_types() -> None:
    assert SchemaCatalog().types("events") == set(EVENT_TYPES)


@pytest.mark.parametrize("rel", TYPED_SCHEMAS)
def test_schema_file_names_a_registered_type_and_a_readable_version(rel: str) -> None:
    kind, type_, version = _type_and_version(rel)
    assert type_ in REGISTRIES[kind], f"orphan schema: {type_} is not registered"
    current = REGISTRIES[kind][type_].SCHEMA_VERSION
    assert 1 <= version <= current
    if version < current:  # an older version is only useful if it can be read
        assert (kind, type_, version) in UPCASTERS


# -- the schemas themselves ---------------------------------------------------------------------
@pytest.mark.parametrize("rel", SCHEMAS)
def test_schema_is_a_described_draft_2020_12_schema(rel: str) -> None:
    schema = _load(ROOT / rel)
    assert schema["$schema"] == DRAFT
    Draft202012Validator.check_schema(schema)
    assert schema["$id"] == f"https://es-sched.dev/schemas/{rel}"
    assert schema["title"]
    assert schema["description"]
    if _kind(rel) in REGISTRIES:
        _, type_, version = _type_and_version(rel)
        assert schema["properties"]["type"] == {"const": type_}
        assert schema["properties"]["schema_version"] == {"const": version}
        assert schema["additionalProperties"] is False
    if _kind(rel) == "events":  # the whole envelope, inlined (no registry resolves $refs)
        envelope = _load(ROOT / "envelope.v1.json")
        assert schema["required"] == envelope["required"]
        assert set(schema["properties"]) == set(envelope["properties"])
        assert schema["properties"]["payload"]["additionalProperties"] is False


@pytest.mark.parametrize("rel", SCHEMAS)
def test_every_schema_has_an_example(rel: str) -> None:
    assert (EXAMPLES / rel).is_file(), f"missing example schemas/examples/{rel}"


@pytest.mark.parametrize("rel", EXAMPLE_FILES)
def test_example_validates_against_its_schema(rel: str) -> None:
    assert (ROOT / rel).is_file(), f"example without a schema: {rel}"
    validator = Draft202012Validator(
        _load(ROOT / rel), format_checker=Draft202012Validator.FORMAT_CHECKER
    )
    errors = validator.iter_errors(_load(EXAMPLES / rel))
    assert [f"{list(e.absolute_path)}: {e.message}" for e in errors] == []


# -- the codec honours the catalogue ----------------------------------------------------------
@pytest.mark.parametrize("rel", CURRENT["events"])
def test_current_event_example_round_trips(rel: str) -> None:
    event = event_from_dict(doc := _example(rel))
    assert event_to_dict(event) == doc
    assert decode_event(encode_event(event)) == event


@pytest.mark.parametrize("rel", CURRENT["commands"])
def test_command_example_round_trips(rel: str) -> None:
    inp = input_from_dict(doc := _example(rel))
    assert input_to_dict(inp) == doc
    assert decode_input(encode_input(inp)) == inp


def test_task_scheduled_v1_is_upcast_to_v2() -> None:
    doc = _example("events/task.scheduled.v1.json")
    original = copy.deepcopy(doc)
    event = event_from_dict(doc)
    assert isinstance(event.payload, TaskScheduled)
    assert event.payload.rate_limit_key is None
    assert event.payload.callback is False
    assert doc == original  # decoding never mutates its input
    out = event_to_dict(event)
    assert out["schema_version"] == 2
    assert out["payload"] == {**doc["payload"], "rate_limit_key": None, "callback": False}
    SchemaCatalog().validate("events", "task.scheduled", 2, out)


_DROP = object()


def _set(path: str, value: Any = _DROP) -> Callable[[Doc], None]:
    """A mutation of the dotted ``path``: set it to ``value``, or delete it."""
    *parents, last = path.split(".")

    def mutate(doc: Doc) -> None:
        for key in parents:
            doc = doc[key]
        if value is _DROP:
            del doc[last]
        else:
            doc[last] = value

    return mutate


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        pytest.param(_set("type", "task.exploded"), "unknown event type", id="unknown-type"),
        pytest.param(_set("type", None), "unknown event type", id="no-type"),
        pytest.param(_set("schema_version", 99), "schema_version 99", id="future-version"),
        pytest.param(_set("schema_version", "1"), "schema_version", id="version-not-int"),
        pytest.param(_set("payload.task_id"), "task_id", id="missing-payload-field"),
        pytest.param(_set("seq"), "seq", id="missing-envelope-field"),
        pytest.param(_set("payload.colour", "red"), "colour", id="extra-payload-field"),
        pytest.param(_set("partition", 3), "partition", id="extra-envelope-field"),
        pytest.param(_set("payload.output", []), "output", id="wrong-payload-type"),
        pytest.param(_set("seq", 0), "seq", id="seq-zero"),
        pytest.param(_set("event_id", "event-17"), "event_id", id="event-id-not-uuid"),
        pytest.param(_set("occurred_at", "yesterday"), "occurred_at", id="bad-time"),
        pytest.param(_set("workflow_id", "w" * 201), "workflow_id", id="workflow-id-too-long"),
    ],
)
def test_event_decoding_rejects(mutate: Callable[[Doc], None], message: str) -> None:
    doc = _example()
    mutate(doc)
    with pytest.raises(SchemaError, match=message):
        event_from_dict(doc)


def test_task_scheduled_v1_rejects_v2_fields() -> None:
    doc = _example("events/task.scheduled.v1.json")
    doc["payload"]["callback"] = True
    with pytest.raises(SchemaError, match="callback"):
        event_from_dict(doc)


@pytest.mark.parametrize(
    ("decode", "raw"),
    [
        pytest.param(decode_event, b"\xff\x00", id="not-utf8"),
        pytest.param(decode_event, b'{"x": NaN}', id="nan"),
        pytest.param(decode_event, b'{"x": -Infinity}', id="infinity"),
        pytest.param(decode_event, b"{", id="truncated"),
        pytest.param(decode_event, b"[]", id="not-an-object"),
        pytest.param(decode_input, b'{"percent": NaN}', id="input-nan"),
        pytest.param(decode_input, b"\xff\x00", id="input-not-utf8"),
        pytest.param(decode_event, b"[" * 100_000, id="deep-nesting"),
        pytest.param(decode_event, b'{"seq": ' + b"1" * 5000 + b"}", id="huge-int"),
        pytest.param(decode_event, b'{"seq": 1e999}', id="float-overflow"),
    ],
)
def test_decoding_rejects_bytes(decode: Callable[[bytes], object], raw: bytes) -> None:
    with pytest.raises(SchemaError):
        decode(raw)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        pytest.param(_set("type", "workflow.explode"), "unknown command type", id="unknown-type"),
        pytest.param(_set("schema_version", 99), "schema_version 99", id="future-version"),
        pytest.param(_set("input_id"), "input_id", id="missing-input-id"),
        pytest.param(_set("input_id", ""), "input_id", id="empty-input-id"),
        pytest.param(_set("priority", 9), "priority", id="priority-out-of-range"),
        pytest.param(_set("command_id", "cmd-1"), "command_id", id="extra-field"),
        pytest.param(_set("definition", {"tasks": []}), "name", id="definition-without-name"),
    ],
)
def test_command_decoding_rejects(mutate: Callable[[Doc], None], message: str) -> None:
    doc = _example("commands/workflow.start.v1.json")
    mutate(doc)
    with pytest.raises(SchemaError, match=message):
        input_from_dict(doc)


# -- Conductor definitions ----------------------------------------------------------------------
def test_definition_examples_are_semantically_valid() -> None:
    workflow = _load(EXAMPLES / "definitions" / "workflow.v1.json")
    taskdef = _load(EXAMPLES / "definitions" / "taskdef.v1.json")
    assert validate_workflow(workflow, [taskdef]) == []


@pytest.mark.parametrize(
    "where",
    [
        pytest.param(("tasks", 0), id="top-level"),
        pytest.param(("tasks", 1, "forkTasks", 0, 0), id="in-a-fork"),
        pytest.param(("tasks", 4, "decisionCases", "false", 0), id="in-a-switch"),
    ],
)
def test_task_without_reference_name_is_rejected(where: tuple[Any, ...]) -> None:
    workflow = _load(EXAMPLES / "definitions" / "workflow.v1.json")
    task = workflow
    for key in where:
        task = task[key]
    del task["taskReferenceName"]
    path = ROOT / "definitions" / "workflow.v1.json"
    with pytest.raises(SchemaError, match="taskReferenceName"):
        SchemaCatalog().check(path, workflow, "workflow")


def test_workflow_schema_task_types_are_the_domain_task_types() -> None:
    schema = _load(ROOT / "definitions" / "workflow.v1.json")
    assert set(schema["$defs"]["task"]["properties"]["type"]["enum"]) == TASK_TYPES


@pytest.mark.parametrize("rel", CONDUCTOR_DEFINITIONS)
def test_conductor_definitions_are_accepted_unchanged(rel: str) -> None:
    """Extra Conductor fields pass; only task types es-sched does not run are refused."""
    validator = SchemaCatalog().validator(ROOT / "definitions" / "workflow.v1.json")
    for error in validator.iter_errors(_load(FIXTURES / rel)):
        assert error.absolute_path and error.absolute_path[-1] == "type", error.message
        assert error.instance not in TASK_TYPES, error.message


def test_a_command_may_name_its_id_command_id() -> None:
    doc = {
        "type": "workflow.pause",
        "schema_version": 1,
        "command_id": "cmd-7",
        "workflow_id": "wf-1",
    }
    inp = input_from_dict(doc)
    assert (inp.input_id, inp.command_id, inp.workflow_id) == ("cmd-7", "cmd-7", "wf-1")


def test_schemas_on_the_hot_path_use_no_ref_so_they_compile() -> None:
    """SchemaCatalog.fast() compiles them (es_sched.serialization.compiled), which refuses
    ``$ref``: keep it out of every schema but the definitions'."""
    for kind in ("events", "commands", "records", "wire", "config"):
        for path in sorted((SchemaCatalog().root / kind).glob("*.json")):
            assert "$ref" not in path.read_text(), path.name
            SchemaCatalog().fast(path)
