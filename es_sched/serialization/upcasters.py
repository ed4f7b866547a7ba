"""Upcasters: read older schema versions as the current one.

One function per (kind, type, from_version), each lifting a document by exactly one version;
``upcast`` chains them until the document reaches the version the domain class declares.
Changes are additive, so an upcaster typically fills a new field with its default.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from es_sched.domain.commands import INPUT_TYPES
from es_sched.domain.events import EVENT_TYPES
from es_sched.errors import SchemaError

Doc = dict[str, Any]
Upcaster = Callable[[Doc], Doc]

UPCASTERS: dict[tuple[str, str, int], Upcaster] = {}


def upcaster(kind: str, type_: str, from_version: int) -> Callable[[Upcaster], Upcaster]:
    def register(fn: Upcaster) -> Upcaster:
        UPCASTERS[(kind, type_, from_version)] = fn
        return fn

    return register


def current_version(kind: str, type_: str) -> int:
    registry: dict[str, Any] = EVENT_TYPES if kind == "events" else INPUT_TYPES
    return int(registry[type_].SCHEMA_VERSION)


def upcast(kind: str, type_: str, doc: Doc) -> Doc:
    version = int(doc.get("schema_version", 1))
    target = current_version(kind, type_)
    if version > target:
        raise SchemaError(
            f"{type_} schema_version {version} is newer than this es-sched reads ({target})"
        )
    while version < target:
        step = UPCASTERS.get((kind, type_, version))
        if step is None:
            raise SchemaError(f"no upcaster for {type_} from schema_version {version}")
        doc = step(dict(doc))
        version += 1
        doc["schema_version"] = version
    return doc


@upcaster("events", "task.scheduled", 1)
def _task_scheduled_v1(doc: Doc) -> Doc:
    """v2 added ``rate_limit_key`` and ``callback`` to task.scheduled; v1 had neither."""
    payload = dict(doc["payload"])
    payload.setdefault("rate_limit_key", None)
    payload.setdefault("callback", False)
    doc["payload"] = payload
    return doc


@upcaster("commands", "worker.task_completed", 1)
@upcaster("commands", "worker.task_failed", 1)
def _outcome_v1(doc: Doc) -> Doc:
    """v2 added ``started`` (ADR 44): a v1 outcome never implied its task's start."""
    doc.setdefault("started", False)
    return doc


@upcaster("commands", "worker.task_failed", 2)
def _failed_v2(doc: Doc) -> Doc:
    """v3 added ``host_fault`` (ADR 58): a v2 failure never blamed its worker's host."""
    doc.setdefault("host_fault", False)
    return doc


@upcaster("events", "task.failed", 1)
def _task_failed_v1(doc: Doc) -> Doc:
    """v2 added ``host_fault`` to task.failed (ADR 58); a v1 failure never blamed the host."""
    payload = dict(doc["payload"])
    payload.setdefault("host_fault", False)
    doc["payload"] = payload
    return doc
