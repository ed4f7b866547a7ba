"""Encode and decode events and inputs; every failure is a ``SchemaError`` with the reason.

Wire form of an event (the envelope of ../shared/DESIGN.md section 1)::

    {"event_id", "workflow_id", "seq", "type", "schema_version", "occurred_at",
     "causation_id", "correlation_id", "payload": {...}, "actor"?}

(``actor``, who caused it, is optional and absent when unknown, so events written before it
existed decode unchanged and need no upcaster)

and of an input: ``{"type", "schema_version", "input_id", "workflow_id", ...fields}``, where a
command may name its id ``command_id`` instead (it is read as ``input_id``). Timestamps are ISO 8601
in UTC. Decoding validates against the JSON Schema of the
document's own version, upcasts it to the current version, then builds the domain object.
"""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime
from typing import Any, get_type_hints

import msgspec
import orjson

from es_sched.domain.commands import (
    INPUT_TYPES,
    Input,
    ReportCompleted,
    ReportFailed,
    StartWorkflow,
)
from es_sched.domain.events import (
    EVENT_TYPES,
    Event,
    Payload,
    TaskCompleted,
    TaskFailed,
    TaskScheduled,
    WorkflowStarted,
)
from es_sched.errors import SchemaError
from es_sched.serialization.schemas import SchemaCatalog, default_catalog
from es_sched.serialization.upcasters import upcast

_DATETIME_FIELDS: dict[type, frozenset[str]] = {}
# Fields added to a type's current version as optional (ADR 60), written only when not
# empty: a record without them stays byte for byte what it was before they existed, so a
# reader that predates them (a decider or projector not yet upgraded) still reads it.
SPARSE: dict[type, tuple[str, ...]] = {
    TaskCompleted: ("logs",),
    TaskFailed: ("logs", "traceback"),
    TaskScheduled: ("timeout",),  # ADR 65: only a task with a dynamic timeout policy has one
    ReportCompleted: ("logs",),
    ReportFailed: ("logs", "traceback"),
    WorkflowStarted: ("sla_tier", "deadline", "sla_retries"),  # ADR 67
    StartWorkflow: ("sla_tier", "deadline", "sla_retries"),
}


def _sparse(fields: dict[str, Any], names: tuple[str, ...]) -> dict[str, Any]:
    out = fields
    for name in names:
        if not fields[name]:
            if out is fields:  # a copy: ``fields`` may be the payload's own ``__dict__``
                out = fields.copy()
            del out[name]
    return out


def _datetime_fields(cls: type) -> frozenset[str]:
    if cls not in _DATETIME_FIELDS:
        hints = get_type_hints(cls)
        _DATETIME_FIELDS[cls] = frozenset(
            f.name for f in dataclasses.fields(cls) if "datetime" in str(hints.get(f.name))
        )
    return _DATETIME_FIELDS[cls]


def format_time(value: datetime) -> str:
    """A time as events and commands carry it: ISO 8601 in UTC, "Z" for the offset."""
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def parse_time(value: Any, what: str) -> datetime:
    """The one time parser of every record: ISO 8601 / RFC 3339 ("Z" or an offset) -> an aware
    datetime (a time without an offset is read as UTC); anything else is a ``SchemaError``."""
    if not isinstance(value, str):
        raise SchemaError(f"{what}: expected an ISO 8601 time, got {value!r}")
    try:
        parsed = datetime.fromisoformat(value)  # Python 3.11 reads "Z" itself
    except ValueError as exc:
        raise SchemaError(f"{what}: {exc}") from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def load_record(raw: bytes | None, what: str) -> Any:
    """A record's JSON (orjson: strict RFC 8259, no NaN, 64-bit integers, bounded nesting)."""
    try:
        return orjson.loads(raw if raw is not None else b"")
    except orjson.JSONDecodeError as exc:
        raise SchemaError(f"{what} is not JSON: {str(exc)[:200]}") from None


def _fields_to_dict(obj: Any, skip: frozenset[str] = frozenset()) -> dict[str, Any]:
    times = _datetime_fields(type(obj))
    out: dict[str, Any] = {}
    for f in dataclasses.fields(obj):
        if f.name in skip:
            continue
        value = getattr(obj, f.name)
        out[f.name] = format_time(value) if f.name in times and value is not None else value
    return out


_FIELD_NAMES: dict[type, frozenset[str]] = {}


def _build(cls: type[Any], data: dict[str, Any], what: str) -> Any:
    names = _FIELD_NAMES.get(cls)
    if names is None:  # dataclasses.fields costs more than the rest of _build
        names = _FIELD_NAMES[cls] = frozenset(f.name for f in dataclasses.fields(cls))
    times = _datetime_fields(cls)
    kwargs = {}
    for key, value in data.items():
        if key not in names:
            raise SchemaError(f"{what}: unknown field {key!r}")
        kwargs[key] = (
            parse_time(value, f"{what}.{key}") if key in times and value is not None else value
        )
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise SchemaError(f"{what}: {exc}") from None


# -- events ---------------------------------------------------------------------------------
def event_to_dict(event: Event) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "event_id": event.event_id,
        "workflow_id": event.workflow_id,
        "seq": event.seq,
        "type": event.type,
        "schema_version": event.schema_version,
        "occurred_at": format_time(event.occurred_at),
        "causation_id": event.causation_id,
        "correlation_id": event.correlation_id,
        "payload": _fields_to_dict(event.payload),
    }
    sparse = SPARSE.get(type(event.payload))
    if sparse is not None:
        doc["payload"] = _sparse(doc["payload"], sparse)
    if event.actor is not None:  # absent, not null: events without one stay byte for byte
        doc["actor"] = event.actor
    return doc


def event_from_dict(doc: Any, catalog: SchemaCatalog | None = None, validate: bool = True) -> Event:
    if not isinstance(doc, dict):
        raise SchemaError(f"an event must be a JSON object, got {type(doc).__name__}")
    etype, version = doc.get("type"), doc.get("schema_version")
    if not isinstance(etype, str) or etype not in EVENT_TYPES:
        raise SchemaError(f"unknown event type {etype!r}")
    cls = EVENT_TYPES[etype]
    if validate:
        (catalog or default_catalog()).validate("events", etype, version, doc)
    doc = upcast("events", etype, doc)
    try:
        payload: Payload = _build(cls, dict(doc["payload"]), etype)
        return Event(
            event_id=doc["event_id"],
            workflow_id=doc["workflow_id"],
            seq=doc["seq"],
            occurred_at=parse_time(doc["occurred_at"], "occurred_at"),
            causation_id=doc["causation_id"],
            correlation_id=doc["correlation_id"],
            payload=payload,
            actor=doc.get("actor"),
        )
    except (KeyError, TypeError) as exc:  # only reachable without validation
        raise SchemaError(f"{etype}: malformed event ({type(exc).__name__}: {exc})") from None


def encode_event(event: Event) -> bytes:
    """The same document as ``event_to_dict``, built for speed: orjson writes the payload's
    fields and datetimes (RFC 3339, "Z") directly. Events come from validated, finite inputs,
    so orjson's NaN-as-null can never apply."""
    doc: dict[str, Any] = {
        "event_id": event.event_id,
        "workflow_id": event.workflow_id,
        "seq": event.seq,
        "type": event.type,
        "schema_version": event.schema_version,
        "occurred_at": event.occurred_at,
        "causation_id": event.causation_id,
        "correlation_id": event.correlation_id,
        "payload": event.payload.__dict__,
    }
    sparse = SPARSE.get(type(event.payload))
    if sparse is not None:
        doc["payload"] = _sparse(doc["payload"], sparse)
    if event.actor is not None:
        doc["actor"] = event.actor
    return orjson.dumps(doc, option=orjson.OPT_SORT_KEYS | orjson.OPT_UTC_Z)


def decode_event(raw: bytes, catalog: SchemaCatalog | None = None) -> Event:
    return event_from_dict(_loads(raw), catalog)


# -- inputs ---------------------------------------------------------------------------------
def input_to_dict(inp: Input) -> dict[str, Any]:
    doc = {"type": inp.TYPE, "schema_version": inp.SCHEMA_VERSION, **_fields_to_dict(inp)}
    sparse = SPARSE.get(type(inp))
    if sparse is not None:
        doc = _sparse(doc, sparse)
    if doc.get("actor", "") is None:  # absent, not null: a decider older than actors reads it
        del doc["actor"]
    return doc


def input_from_dict(doc: Any, catalog: SchemaCatalog | None = None) -> Input:
    catalog = catalog or default_catalog()
    if not isinstance(doc, dict):
        raise SchemaError(f"a command must be a JSON object, got {type(doc).__name__}")
    if "command_id" in doc and "input_id" not in doc:  # DESIGN.md names a command's id so
        doc = {("input_id" if k == "command_id" else k): v for k, v in doc.items()}
    itype, version = doc.get("type"), doc.get("schema_version")
    if not isinstance(itype, str) or itype not in INPUT_TYPES:
        raise SchemaError(f"unknown command type {itype!r}")
    cls = INPUT_TYPES[itype]
    catalog.validate("commands", itype, version, doc)
    doc = upcast("commands", itype, doc)
    fields = {k: v for k, v in doc.items() if k not in ("type", "schema_version")}
    result: Input = _build(cls, fields, itype)
    return result


def encode_input(inp: Input) -> bytes:
    return _dumps(input_to_dict(inp))


def decode_input(raw: bytes, catalog: SchemaCatalog | None = None) -> Input:
    return input_from_dict(_loads(raw), catalog)


_JSON = msgspec.json.Decoder()


def _loads(raw: bytes) -> Any:
    """Strict RFC 8259 JSON (ADR 30: msgspec, about 5x the standard library's ``json`` here):
    UTF-8 only, no NaN/Infinity, no number that is not a finite double, arbitrary-precision
    integers as Python's ``json`` reads them, the last of duplicate keys. A lone surrogate
    escape (``"\\ud800"``) is refused as well: no encoder could write it back (orjson refuses
    it), so it would otherwise stop the decider at the first event it produced."""
    try:
        return _JSON.decode(raw)
    except (msgspec.DecodeError, RecursionError) as exc:
        # DecodeError covers malformed JSON, invalid UTF-8 and numbers out of range (1e400);
        # RecursionError a document nested too deep to be anything but hostile.
        raise SchemaError(f"not UTF-8 JSON: {type(exc).__name__}: {str(exc)[:200]}") from None


def _dumps(doc: dict[str, Any]) -> bytes:
    try:
        return json.dumps(doc, separators=(",", ":"), sort_keys=True, allow_nan=False).encode()
    except ValueError as exc:
        raise SchemaError(f"cannot encode {doc.get('type')}: {exc}") from None
