"""``decode_logged_event``'s one-pass path (``_one_pass``) decodes exactly what the
general path (orjson, upcast, ``event_from_dict`` without validation) decodes, and leaves
everything else to it: older versions, refused fields, records that are not events."""

from __future__ import annotations

import dataclasses
import json
from typing import Any, get_type_hints

import orjson
import pytest

from es_sched.domain.events import EVENT_TYPES, Event
from es_sched.errors import SchemaError
from es_sched.serialization import decode_logged_event, encode_event, event_from_dict
from es_sched.serialization.logged import _one_pass
from testkit import ROOT

EXAMPLES = sorted((ROOT / "schemas" / "examples" / "events").glob("*.json"))
GOLDEN = sorted((ROOT / "tests" / "fixtures" / "golden").glob("*.events.jsonl"))


def _general(raw: bytes) -> Any:
    return event_from_dict(orjson.loads(raw), validate=False)


def _current_examples() -> list[bytes]:
    out = []
    for path in EXAMPLES:
        doc = json.loads(path.read_text())
        if doc["schema_version"] == EVENT_TYPES[doc["type"]].SCHEMA_VERSION:
            out.append(encode_event(event_from_dict(doc)))
    return out


def _golden_records() -> list[bytes]:
    return [line.encode() for p in GOLDEN for line in p.read_text().splitlines() if line.strip()]


def test_every_event_type_has_a_current_example() -> None:
    decoded = {_general(raw).type for raw in _current_examples()}
    assert decoded == set(EVENT_TYPES)


@pytest.mark.parametrize("raw", _current_examples(), ids=lambda r: orjson.loads(r)["type"])
def test_current_examples_take_the_one_pass_path_and_decode_equal(raw: bytes) -> None:
    fast = _one_pass(raw)
    assert fast is not None
    assert fast == _general(raw)
    assert encode_event(fast) == raw


def test_golden_histories_decode_equal_re_encoded_and_as_logged() -> None:
    """The golden histories hold real v1 events (upcast, so the general path) and, once
    re-encoded as the decider writes them now, current ones (the one-pass path)."""
    records = _golden_records()
    assert len(records) > 100
    took_general = 0
    for raw in records:
        expected = _general(raw)
        assert decode_logged_event(raw) == expected
        took_general += _one_pass(raw) is None
        current = encode_event(expected)
        assert _one_pass(current) == expected
    assert took_general > 0  # the v1 task.scheduled events


def _mutated(change: Any) -> bytes:
    doc = orjson.loads(_current_examples()[0])
    change(doc)
    return orjson.dumps(doc)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        pytest.param(lambda d: d["payload"].update(extra=1), "unknown field", id="payload-field"),
        pytest.param(lambda d: d.update(type="no.such"), "unknown event type", id="type"),
        pytest.param(lambda d: d.update(schema_version=99), "newer than", id="newer"),
        pytest.param(lambda d: d.update(occurred_at="yesterday"), "occurred_at", id="time"),
        pytest.param(lambda d: d.pop("event_id"), "malformed", id="missing"),
    ],
)
def test_refusals_are_the_general_paths(change: Any, message: str) -> None:
    raw = _mutated(change)
    assert _one_pass(raw) is None
    with pytest.raises(SchemaError, match=message):
        decode_logged_event(raw)


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(lambda d: d.update(occurred_at="2026-01-02T03:04:05"), id="naive-time"),
        pytest.param(lambda d: d.update(occurred_at="2026-01-02T05:04:05+02:00"), id="offset"),
        pytest.param(lambda d: d.update(seq=3.0), id="float-seq"),
        pytest.param(lambda d: d.update(extra="kept out"), id="envelope-field"),
        pytest.param(lambda d: d.update(actor=None), id="null-actor"),
    ],
)
def test_what_both_accept_decodes_equal(change: Any) -> None:
    raw = _mutated(change)
    assert decode_logged_event(raw) == _general(raw)


def test_not_json_is_refused() -> None:
    with pytest.raises(SchemaError, match="not JSON"):
        decode_logged_event(b"{")


def test_objects_made_without_init_are_what_init_makes() -> None:
    """The one pass sets ``__dict__`` as pickle does; that is ``__init__``'s result only for
    dataclasses without ``__post_init__`` or ``__slots__``, and with every field in it."""
    for cls in (Event, *EVENT_TYPES.values()):
        assert not hasattr(cls, "__post_init__"), cls
        assert "__slots__" not in vars(cls), cls
    for raw in _current_examples():
        fast, general = _one_pass(raw), _general(raw)
        assert fast is not None
        assert vars(fast).keys() == vars(general).keys()
        assert vars(fast.payload) == vars(general.payload)
        assert [type(v) for v in vars(fast.payload).values()] == [
            type(v) for v in vars(general.payload).values()
        ]


def test_a_float_field_keeps_an_int_as_written() -> None:
    """msgspec would read ``1`` for a float field as ``1.0``, which encodes back as ``1.0``:
    the mirror keeps the int, as the general path does."""
    floats = {
        etype: f.name
        for etype, cls in EVENT_TYPES.items()
        for f in dataclasses.fields(cls)
        if get_type_hints(cls)[f.name] is float
    }
    assert floats, "no event type has a float field: drop the mirror's float rule"
    for raw in _current_examples():
        doc = orjson.loads(raw)
        if doc["type"] not in floats:
            continue
        doc["payload"][floats[doc["type"]]] = 1
        fast = _one_pass(orjson.dumps(doc))
        assert fast is not None
        assert type(getattr(fast.payload, floats[doc["type"]])) is int
        assert encode_event(fast) == encode_event(_general(orjson.dumps(doc)))
