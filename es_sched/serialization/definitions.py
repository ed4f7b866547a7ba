"""Records of the compacted ``definitions`` topic: workflow definitions and TaskDefs.

Key ``workflow:<name>:<version>`` -> a Conductor workflow definition, key ``taskdef:<name>`` ->
a Conductor TaskDef; the value is the document itself as JSON (sorted keys), a tombstone deletes
the key. Schemas: ``schemas/definitions/{workflow,taskdef}.v1.json`` (the documents carry no
version field of their own; a workflow's ``version`` is the definition's, not the format's).

``encode_definition`` writes what ``defs push`` validated (schema and semantics, see
``es_sched.commands.prepare``). ``decode_definition`` checks the key, the document against its
schema with jsonschema (the schemas use ``$ref``; the topic is small and read at start-up and
on change, never per task) and that the document's name and version are the key's, and raises
``SchemaError`` with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from es_sched.errors import SchemaError
from es_sched.serialization.codec import load_record
from es_sched.serialization.schemas import default_catalog

FAMILY = "definitions"
VERSIONS = {"workflow": 1, "taskdef": 1}  # record type -> the version written and read
JSON = dict[str, Any]


@dataclass(frozen=True)
class DefinitionRecord:
    kind: str  # "workflow" | "taskdef"
    name: str
    version: int | None  # a workflow's version; None for a TaskDef
    doc: JSON | None  # None: a tombstone, the key is deleted


def workflow_key(name: str, version: int) -> str:
    return f"workflow:{name}:{version}"


def taskdef_key(name: str) -> str:
    return f"taskdef:{name}"


def key_of(kind: str, doc: JSON) -> str:
    """The record key of a validated definition (``kind``: workflow or taskdef)."""
    if kind == "workflow":
        return workflow_key(str(doc["name"]), int(doc.get("version", 1)))
    return taskdef_key(str(doc["name"]))


def encode_definition(doc: JSON) -> bytes:
    try:  # YAML may bring non-string keys (``decisionCases: {1: ...}``): written as strings
        return orjson.dumps(doc, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS)
    except TypeError as exc:
        raise SchemaError(f"definition {doc.get('name')!r} is not JSON: {exc}") from None


def decode_definition(key: str | bytes | None, raw: bytes | None) -> DefinitionRecord:
    text = key.decode(errors="replace") if isinstance(key, bytes) else (key or "")
    kind, _, rest = text.partition(":")
    if kind == "workflow":
        name, _, number = rest.rpartition(":")
        if not name or not number.isdigit():
            raise SchemaError(f"definitions key {text!r}: expected workflow:<name>:<version>")
        version: int | None = int(number)
    elif kind == "taskdef" and rest:
        name, version = rest, None
    else:
        raise SchemaError(f"definitions key {text!r}: expected workflow:... or taskdef:...")
    if raw is None:
        return DefinitionRecord(kind, name, version, None)
    doc = load_record(raw, f"definition {text!r}")
    catalog = default_catalog()
    catalog.check(catalog.path(FAMILY, kind, VERSIONS[kind]), doc, f"definition {text!r}")
    if key_of(kind, doc) != text:
        raise SchemaError(f"definition {text!r}: its name and version say {key_of(kind, doc)!r}")
    return DefinitionRecord(kind, name, version, doc)
