"""The decider's JSON reader (ADR 30, msgspec): what the standard library's ``json`` with the
old hooks accepted is accepted alike, what it refused is refused, and a lone surrogate, which
no encoder can write back, is now a refusal (a dead letter), not a crash at the first event."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from es_sched.errors import SchemaError
from es_sched.serialization.codec import _loads, decode_input


def _stdlib(raw: bytes) -> Any:
    """The reader before ADR 30."""

    def finite(text: str) -> float:
        value = float(text)
        if not math.isfinite(value):
            raise ValueError(text)
        return value

    def constant(name: str) -> Any:
        raise ValueError(name)

    return json.loads(raw.decode("utf-8"), parse_constant=constant, parse_float=finite)


SAME = [
    b'{"a":1,"a":2}',
    b"1.5",
    b"1E2",
    b"-0",
    b"-0.0",
    b"123456789012345678901234567890",
    b'{"a":"\xc3\xa9","b":[true,false,null]}',
    b' {"a":1} ',
    b'"\\u0000"',
    b'"\\ud83d\\ude00"',
]
REFUSED = [
    b"NaN",
    b"Infinity",
    b"-Infinity",
    b"1e400",
    b"-1e400",
    b"\xff",
    b'{"a":1} x',
    b"\xef\xbb\xbf{}",
    b"[" * 100_000 + b"]" * 100_000,
    b"",
]


@pytest.mark.parametrize("raw", SAME)
def test_accepted_as_before(raw: bytes) -> None:
    got, was = _loads(raw), _stdlib(raw)
    assert got == was
    assert type(got) is type(was)


@pytest.mark.parametrize("raw", REFUSED)
def test_refused_as_before(raw: bytes) -> None:
    with pytest.raises((ValueError, RecursionError, UnicodeDecodeError)):
        _stdlib(raw)
    with pytest.raises(SchemaError):
        _loads(raw)


def test_a_lone_surrogate_is_a_refusal() -> None:
    doc = (
        b'{"type":"workflow.start","schema_version":1,"input_id":"c","workflow_id":"w",'
        b'"name":"n","input":{"x":"\\ud800"}}'
    )
    with pytest.raises(SchemaError):
        decode_input(doc)
