"""Events read back from the events topic: one typed pass for the current versions.

Only the decider writes the events topic, from typed, validated inputs, through
``codec.encode_event``; the projectors, the replay and the auditors read every event of it, and
decoding was the read side's largest single cost (orjson, ``upcast`` and ``codec._build``;
ADR 32, ADR 43). Here msgspec decodes a current-version
event in one pass into a struct mirroring its envelope and payload (a tagged union on
``type``, unknown fields refused), and the domain objects are made from the struct's fields
as ``pickle`` makes them, without running ``__init__`` again (the mirror already holds every
field, defaults filled).

What the one pass does not take (an older ``schema_version`` to upcast, a field it refuses or
a type it would convert, anything that is not an event) goes the general way, orjson and
``codec.event_from_dict`` without validation, so what is accepted and every refusal's message
stay that path's. Times stay strings in the mirror and are read by ``codec.parse_time``, the
one time parser. ``tests/unit/serialization/test_logged_event_decode.py`` holds both paths
equal on an example of every event type and on the golden histories.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime
from types import NoneType, UnionType
from typing import Any, Union, get_args, get_type_hints

import msgspec
import orjson

from es_sched.domain.events import EVENT_TYPES, Event, Payload
from es_sched.errors import SchemaError
from es_sched.serialization.codec import event_from_dict, parse_time

_ENVELOPE: list[tuple[str, Any] | tuple[str, Any, Any]] = [
    ("event_id", str),
    ("workflow_id", str),
    ("seq", int),
    ("schema_version", int),
    ("occurred_at", str),
    ("causation_id", str),
    ("correlation_id", str),
    ("actor", str | None, None),
]


def _mirror_type(hint: Any) -> Any:
    """The type msgspec decodes a field as: a time stays a string (``parse_time`` reads it),
    a float field takes an int as an int (``1`` stays ``1``, as the general path keeps it,
    so it encodes back to the same bytes); everything else as declared."""
    if hint is datetime:
        return str
    if hint is float:
        return int | float
    if isinstance(hint, UnionType) and NoneType in get_args(hint):
        (inner,) = (a for a in get_args(hint) if a is not NoneType)
        return _mirror_type(inner) | None
    return hint


def _mirror(etype: str, cls: type[Payload]) -> tuple[type[msgspec.Struct], frozenset[str]]:
    hints = get_type_hints(cls)
    fields: list[tuple[str, Any] | tuple[str, Any, Any]] = []
    times = set()
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        if hint is datetime or hint == datetime | None:
            times.add(f.name)
        kind = _mirror_type(hint)
        if f.default is not dataclasses.MISSING:
            fields.append((f.name, kind, f.default))
        elif f.default_factory is not dataclasses.MISSING:
            fields.append((f.name, kind, msgspec.field(default_factory=f.default_factory)))
        else:
            fields.append((f.name, kind))
    payload = msgspec.defstruct(f"{cls.__name__}Doc", fields, forbid_unknown_fields=True)
    envelope = msgspec.defstruct(
        f"{cls.__name__}Logged",
        [*_ENVELOPE[:-1], ("payload", payload), _ENVELOPE[-1]],
        tag_field="type",
        tag=etype,
        forbid_unknown_fields=True,
    )
    return envelope, frozenset(times)


_CLASSES: dict[type[msgspec.Struct], tuple[type[Payload], frozenset[str]]] = {}
for _etype, _cls in EVENT_TYPES.items():
    _struct, _times = _mirror(_etype, _cls)
    _CLASSES[_struct] = (_cls, _times)
_DECODER: msgspec.json.Decoder[Any] = msgspec.json.Decoder(Union[tuple(_CLASSES)])  # noqa: UP007
_new = object.__new__
_set = object.__setattr__
_asdict = msgspec.structs.asdict


def _one_pass(raw: bytes) -> Event | None:
    """A current-version event, or None for the general path to decide."""
    try:
        doc = _DECODER.decode(raw)
    except (msgspec.DecodeError, RecursionError):
        return None
    cls, times = _CLASSES[type(doc)]
    if doc.schema_version != cls.SCHEMA_VERSION:
        return None
    fields = _asdict(doc.payload)
    try:
        for name in times:
            if fields[name] is not None:
                fields[name] = parse_time(fields[name], f"{cls.TYPE}.{name}")
        occurred_at = parse_time(doc.occurred_at, "occurred_at")
    except SchemaError:
        return None
    payload = _new(cls)
    _set(payload, "__dict__", fields)
    event = _new(Event)
    _set(
        event,
        "__dict__",
        {
            "event_id": doc.event_id,
            "workflow_id": doc.workflow_id,
            "seq": doc.seq,
            "occurred_at": occurred_at,
            "causation_id": doc.causation_id,
            "correlation_id": doc.correlation_id,
            "payload": payload,
            "actor": doc.actor,
        },
    )
    return event


def decode_logged_event(raw: bytes) -> Event:
    """An event read back from the events topic: not validated against its schema again,
    upcast when older; a record that is not an event raises ``SchemaError``."""
    event = _one_pass(raw)
    if event is not None:
        return event
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise SchemaError(f"not JSON: {str(exc)[:200]}") from None
    return event_from_dict(doc, validate=False)
