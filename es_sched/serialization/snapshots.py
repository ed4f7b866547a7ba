"""Workflow state snapshots for the decider's compacted changelog (format version 2, ADR 18).

A snapshot is the state as JSON: tasks as plain objects, times in ISO 8601, and the documents
fixed at the workflow's start (definition, TaskDefs, pinned sub-workflow definitions) not inline
but by the SHA-256 of their canonical JSON, ``definition_hash``. That bundle is its own changelog
record, stored once per partition under ``DEFINITION_KEY_PREFIX + hash`` (content-addressed:
the same documents, the same key; compaction keeps one). A restore reads the bundles before it
decodes the states that name them (``serialization.changelog``).

Versions: ``snapshot_version`` 1 carried the documents inline in every snapshot; it is upcast
(``upcast``: the documents become the snapshot's own bundle), never refused. An unknown
version fails loudly instead of guessing.

Seams: ``encode_state``/``decode_state`` turn one state into one snapshot document's bytes and
back; ``definition_record`` is the bundle record a snapshot needs beside it. Splitting a large
snapshot across records wraps these two, it does not change them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property
from typing import Any

import orjson

from es_sched.domain.definitions import DefinitionError, TaskDef, parse_tasks
from es_sched.domain.fanout import rebuild
from es_sched.domain.parsed import parse_workflow_cached, taskdefs_by_name
from es_sched.domain.state import TaskState, WorkflowState
from es_sched.errors import SchemaError

SNAPSHOT_VERSION = 2
DEFINITION_KEY_PREFIX = "~def:"  # never a workflow id: those are uuids or `start-child` ids
_BUNDLED = ("definition", "taskdefs", "subworkflow_definitions")
_TASK_TIMES = frozenset(
    {"scheduled_at", "started_at", "ended_at", "last_progress_at", "retry_due_at", "wait_until"}
)
_WF_TIMES = frozenset({"created_at", "updated_at", "ended_at"})
# What ``state_to_dict`` writes of a task: its ``__dict__``, every field.
_TASK_FIELDS = frozenset(TaskState.__dataclass_fields__)


def _parse(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value is not None else None


_FRAGMENTS: dict[int, tuple[object, orjson.Fragment]] = {}


def _fragment(doc: Any) -> orjson.Fragment:
    """``doc`` serialised once: a workflow's definition is in every one of its snapshots."""
    hit = _FRAGMENTS.get(id(doc))
    if hit is not None and hit[0] is doc:
        return hit[1]
    fragment = orjson.Fragment(orjson.dumps(doc, option=orjson.OPT_SORT_KEYS))
    _FRAGMENTS[id(doc)] = (doc, fragment)
    if len(_FRAGMENTS) > 1024:
        _FRAGMENTS.pop(next(iter(_FRAGMENTS)))
    return fragment


@dataclass(frozen=True)
class Bundle:
    """The documents a workflow started with, parsed once for every state that names them."""

    hash: str
    definition: dict[str, Any]
    taskdefs: list[dict[str, Any]]
    subworkflow_definitions: tuple[Any, ...]

    @cached_property
    def parsed_taskdefs(self) -> Mapping[str, TaskDef]:
        """The task definitions parsed, once per bundle (one object per hash: ``_bundle``)
        rather than once per snapshot: a verify decoding 4,000 media snapshots spent 1.9 % of
        its samples parsing the same taskdefs again. Shared by every state decoded from this
        bundle, as their ``WorkflowDef`` is; nothing mutates a state's ``taskdefs`` (the fold
        shares one mapping between the workflows it starts, ``domain.parsed``) and a
        ``TaskDef`` is frozen. Cached here as well: no JSON key to build per snapshot."""
        return taskdefs_by_name(self.taskdefs)


_BY_DOCS: dict[tuple[int, ...], tuple[tuple[object, ...], str, bytes]] = {}
_BY_STATE: dict[tuple[int, ...], tuple[tuple[object, ...], str, bytes]] = {}
_BY_HASH: dict[str, Bundle] = {}


def _remember(cache: dict[Any, Any], key: Any, value: Any) -> None:
    cache[key] = value
    if len(cache) > 1024:
        cache.pop(next(iter(cache)))


def _bundle_bytes(definition: Any, taskdefs: list[Any], subs: Any) -> tuple[str, bytes]:
    raw = orjson.dumps(
        {"definition": definition, "taskdefs": taskdefs, "subworkflow_definitions": list(subs)},
        option=orjson.OPT_SORT_KEYS,
    )
    return hashlib.sha256(raw).hexdigest(), raw


def definition_record(st: WorkflowState) -> tuple[str, bytes]:
    """(hash, value) of the bundle ``st`` names; memoised on the documents' identity, which every
    workflow of one definition shares, so a batch does not hash the same documents again.

    First on the three objects a state holds them in (its ``WorkflowDef``, its TaskDefs mapping,
    its pinned sub-workflow definitions), which every state of the workflow shares (``clone``)
    and nothing changes in place (``Bundle.parsed_taskdefs``): a media snapshot then looks up
    one key instead of building and comparing a dozen documents' identities: 3.2 % of the
    decider's samples on the media DAG -> 0.5 % (py-spy, profiles/decider-cpu-media-definition-
    *.txt); `bench/decider_cpu.py --media --before`, 3 pairs: 1.06x at the median (0.97, 1.15,
    1.01: inside this host's spread)."""
    held = (st.definition, st.taskdefs, st.subworkflow_definitions)
    key = (id(held[0]), id(held[1]), id(held[2]))
    known = _BY_STATE.get(key)
    if known is not None and all(a is b for a, b in zip(known[0], held, strict=True)):
        return known[1], known[2]
    digest, raw = _by_docs(st)
    _remember(_BY_STATE, key, (held, digest, raw))  # held: their ids are not reused meanwhile
    return digest, raw


def _by_docs(st: WorkflowState) -> tuple[str, bytes]:
    docs: tuple[object, ...] = (
        st.definition.raw,
        *(td.raw for td in st.taskdefs.values()),
        None,
        *st.subworkflow_definitions,
    )
    ids = tuple(id(d) for d in docs)
    hit = _BY_DOCS.get(ids)
    if hit is not None and all(a is b for a, b in zip(hit[0], docs, strict=True)):
        return hit[1], hit[2]
    digest, raw = _bundle_bytes(
        st.definition.raw, [td.raw for td in st.taskdefs.values()], st.subworkflow_definitions
    )
    _remember(_BY_DOCS, ids, (docs, digest, raw))
    return digest, raw


def decode_bundle(digest: str, raw: bytes) -> Bundle:
    """A bundle record; its content must hash to its key (a wrong one fails loudly)."""
    try:
        doc = orjson.loads(raw)
        found, _ = _bundle_bytes(doc["definition"], doc["taskdefs"], doc["subworkflow_definitions"])
    except (ValueError, KeyError, TypeError) as exc:
        raise SchemaError(f"unreadable definition bundle {digest}: {exc}") from None
    if found != digest:
        raise SchemaError(f"definition bundle {digest} holds documents hashing to {found}")
    return _bundle(digest, doc)


def _bundle(digest: str, doc: dict[str, Any]) -> Bundle:
    hit = _BY_HASH.get(digest)
    if hit is None:  # one object per hash: parse caches then hit by identity
        hit = Bundle(
            digest, doc["definition"], doc["taskdefs"], tuple(doc["subworkflow_definitions"])
        )
        _remember(_BY_HASH, digest, hit)
    return hit


def upcast(doc: dict[str, Any]) -> tuple[dict[str, Any], Bundle | None]:
    """A snapshot document of any known version as version 2, with the bundle it carried inline
    (version 1), or None when the bundle is a record of its own (version 2)."""
    version = doc.get("snapshot_version")
    if version == SNAPSHOT_VERSION:
        return doc, None
    if version != 1:
        raise SchemaError(f"unknown snapshot_version {version!r}")
    subs = doc.get("subworkflow_definitions", [])
    digest, _ = _bundle_bytes(doc["definition"], doc["taskdefs"], subs)
    bundle = _bundle(
        digest,
        {
            "definition": doc["definition"],
            "taskdefs": doc["taskdefs"],
            "subworkflow_definitions": subs,
        },
    )
    rest = {k: v for k, v in doc.items() if k not in _BUNDLED}
    return {**rest, "snapshot_version": SNAPSHOT_VERSION, "definition_hash": digest}, bundle


def state_to_dict(st: WorkflowState, digest: str | None = None) -> dict[str, Any]:
    """The snapshot document; times stay ``datetime`` (orjson writes them as RFC 3339) and the
    dynamic tasks are pre-serialised fragments shared by every snapshot. ``digest``: the
    bundle's hash when the caller has it already (``definition_record``)."""
    return {
        "snapshot_version": SNAPSHOT_VERSION,
        "workflow_id": st.workflow_id,
        "definition_hash": digest if digest is not None else definition_record(st)[0],
        "status": st.status,
        "input": st.input,
        "created_at": st.created_at,
        "correlation_id": st.correlation_id,
        "seq": st.seq,
        "priority": st.priority,
        "tenant": st.tenant,
        "output": st.output,
        "variables": st.variables,
        "reason": st.reason,
        "ending": st.ending,
        "updated_at": st.updated_at,
        "ended_at": st.ended_at,
        "parent_workflow_id": st.parent_workflow_id,
        "parent_task_id": st.parent_task_id,
        "tasks": [task.__dict__ for task in st.tasks.values()],  # plain dataclasses, all JSON
        "latest": dict(st.latest),  # a layered map (domain.layered) to a plain object
        "dynamic": [_fragment(t.raw) for t in st.dynamic.values()],
        "recent_inputs": list(st.recent_inputs),
        **_sla(st),
    }


def _sla(st: WorkflowState) -> dict[str, Any]:
    """A workflow's tier and deadline, only when it has them: a snapshot without stays byte
    for byte what it was, and a reader that predates them still reads it."""
    out: dict[str, Any] = {}
    if st.sla_tier is not None:
        out["sla_tier"] = st.sla_tier
    if st.deadline is not None:
        out["deadline"] = st.deadline
    if st.sla_retries is not None:
        out["sla_retries"] = st.sla_retries
    return out


def state_from_dict(
    doc: dict[str, Any], definitions: Mapping[str, Bundle] | None = None
) -> WorkflowState:
    """The state of a snapshot document of any known version; ``definitions`` holds the bundles
    read so far (a version 1 document carries its own)."""
    doc, own = upcast(doc)
    bundle = own or (definitions or {}).get(doc["definition_hash"])
    if bundle is None:
        raise SchemaError(f"snapshot names definition bundle {doc['definition_hash']} not read")
    definition, problems = parse_workflow_cached(bundle.definition)
    if definition is None or problems:
        raise DefinitionError(problems)
    tasks = {}
    for row in doc["tasks"]:
        if row.keys() == _TASK_FIELDS:  # every field, as written: restored as ``clone`` copies
            task = object.__new__(TaskState)
            task.__dict__.update(row)
            for key in _TASK_TIMES:
                task.__dict__[key] = _parse(row[key])
        else:  # fewer (a field added since, with its default) or unknown: the constructor's say
            values: dict[str, Any] = {
                k: (_parse(v) if k in _TASK_TIMES else v) for k, v in row.items()
            }
            task = TaskState(**values)
        tasks[task.task_id] = task
    dynamic = {t.ref: t for t in parse_tasks(doc["dynamic"], [], "snapshot dynamic tasks")}
    fields = {
        k: v
        for k, v in doc.items()
        if k not in ("snapshot_version", "definition_hash", "tasks", "dynamic")
    }
    for key in _WF_TIMES:
        fields[key] = _parse(fields[key])
    if "deadline" in fields:
        fields["deadline"] = _parse(fields["deadline"])
    fields["subworkflow_definitions"] = bundle.subworkflow_definitions
    fields["recent_inputs"] = tuple(fields["recent_inputs"])
    created = fields.pop("created_at")
    assert created is not None
    return WorkflowState(
        definition=definition,
        taskdefs=bundle.parsed_taskdefs,
        tasks=tasks,
        dynamic=dynamic,
        created_at=created,
        **fields,
    )


def encode_state(st: WorkflowState, digest: str | None = None) -> bytes:
    """Keys in the order ``state_to_dict`` writes them, not sorted: a snapshot is read back by
    ``decode_state`` only, compared decoded (``replay.verify_changelog``), never by its bytes or
    a hash of them, so sorting would be paid on every write for nothing (ADR 30). Bundles stay
    canonical: their hash is their key."""
    return orjson.dumps(state_to_dict(st, digest))


def decode_state(raw: bytes, definitions: Mapping[str, Bundle] | None = None) -> WorkflowState:
    try:
        # the fan-out index is derived, not stored (domain.fanout)
        return rebuild(state_from_dict(orjson.loads(raw), definitions))
    except (ValueError, KeyError, TypeError) as exc:
        raise SchemaError(f"unreadable decider snapshot: {exc}") from None
