"""The compiled checks (es_sched.serialization.compiled) say what jsonschema says, on every
compiled schema's example and on mutations of it: each field dropped, each field given values
of every JSON type, an unknown field added."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from es_sched.errors import SchemaError
from es_sched.serialization import schema_dir
from es_sched.serialization.compiled import compile_schema

ROOT = schema_dir()
COMPILED = sorted(
    p.relative_to(ROOT).as_posix()
    for family in ("events", "commands", "records", "wire", "config")
    for p in (ROOT / family).glob("*.json")
)
ODD_VALUES: list[Any] = [
    None,
    True,
    False,
    0,
    -1,
    1,
    1.0,
    2.5,
    10**6,
    "",
    "x",
    "x" * 300,
    "2026-01-01T00:00:00Z",
    [],
    ["a"],
    [1],
    {},
    {"a": 1},
    {"cpu": -1},
]


def _load(path: Path) -> Any:
    return json.loads(path.read_text())


def _variants(doc: Any, depth: int = 0) -> Iterator[Any]:
    """The document with one change each, also inside nested objects (two levels down)."""
    if not isinstance(doc, dict) or depth > 2:
        return
    yield {**doc, "surprise": 1}
    for key, value in doc.items():
        yield {k: v for k, v in doc.items() if k != key}
        for odd in ODD_VALUES:
            yield {**doc, key: odd}
        for inner in _variants(value, depth + 1):
            yield {**doc, key: inner}
        if isinstance(value, list) and value:
            for odd in ODD_VALUES:
                yield {**doc, key: [*value, odd]}
            for inner in _variants(value[0], depth + 1):
                yield {**doc, key: [inner, *value[1:]]}


@pytest.mark.parametrize("rel", COMPILED)
def test_compiled_check_agrees_with_jsonschema(rel: str) -> None:
    schema = _load(ROOT / rel)
    check = compile_schema(schema, rel)
    reference = Draft202012Validator(schema)
    example = _load(ROOT / "examples" / rel)
    assert check(example) is True
    variants = [*_variants(example), *ODD_VALUES]
    assert len(variants) > len(ODD_VALUES)
    for doc in variants:
        before = copy.deepcopy(doc)
        assert check(doc) == reference.is_valid(doc), json.dumps(doc)[:300]
        assert doc == before  # checking never changes the document


@pytest.mark.parametrize("value", ODD_VALUES)
def test_compiled_keywords_agree_with_jsonschema_on_any_value(value: Any) -> None:
    schemas: list[dict[str, Any]] = [
        {"type": "integer", "minimum": 0, "maximum": 8},
        {"type": ["string", "null"], "minLength": 1, "maxLength": 3},
        {"type": "number", "exclusiveMinimum": 0},
        {"exclusiveMaximum": 1, "minLength": 2},
        {"const": 1},
        {"const": "x"},
        {"const": None},
        {"const": {"a": 1}},
        {"enum": ["a", "x"]},
        {"enum": [1, None, True]},
        {"pattern": "^x+$"},
        {"type": "boolean"},
        {"items": {"type": "string"}},
        {"additionalProperties": {"type": "integer"}},
        {"required": ["a"]},
        {"properties": {"a": {"type": "string"}}, "additionalProperties": False},
    ]
    for schema in schemas:
        expected = Draft202012Validator(schema).is_valid(value)
        assert compile_schema(schema)(value) == expected, (schema, value)


@pytest.mark.parametrize(
    "schema",
    [
        {"$ref": "#/$defs/x"},
        {"anyOf": [{"type": "string"}]},
        {"properties": {"a": {"oneOf": []}}},
        {"items": [{"type": "string"}]},
        False,
    ],
)
def test_keywords_that_do_not_compile_are_refused_not_dropped(schema: Any) -> None:
    with pytest.raises(SchemaError):
        compile_schema(schema)
