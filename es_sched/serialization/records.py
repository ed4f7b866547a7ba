"""Ready, timer and retry records: what the decider hands to the dispatcher, the timer service
and the retry relay; the lease journal, the roles' liveness records and alerts. Schemas:
``schemas/records/{ready,timer,retry,lease,liveness,alert}.v1.json``.

- **ready** (``<prefix>.ready``, key = the task's evaluated rate-limit key, else its name (ADR
  13); written by the decider, read by the dispatcher): one task instance to place on a worker.
  ``decode_ready`` returns the document with ``workflow_started_at`` parsed; fields the schema
  marks optional default to priority 4, attempt 1, no tenant, no resources, no limits
  (``ready_limits``).
- **timer** (``<prefix>.timers``, compacted, key = timer id; decider -> timer service): a
  durable timer, decoded as the domain's ``Timer``.
- **retry** (``<prefix>.retry-<tier>s``, key = workflow id; decider -> retry relay): a delayed
  retry, decoded as ``Retry``.
- **lease** (``<prefix>.leases``, compacted, key = task id; dispatcher -> dispatcher after a
  restart or rebalance, ADR 14): a task's ready record, the last lease epoch granted and its
  live lease if any, decoded as ``LeaseRecord``.
- **liveness** (``<prefix>.system``, compacted, key = ``<role>/<instance>``; every role process
  -> the API and starting processes, ADR 61): who runs a role instance, where, holding what,
  decoded as ``roster.Presence``.
- **alert** (``<prefix>.alerts``, key = the subject, e.g. the worker id; a dispatcher ->
  whatever routes alerts to operations, ADR 71): ``kind`` ``worker.dead`` says a worker fell
  silent past ``ES_SCHED_DISPATCH_DEAD_AFTER_S`` and which tasks' leases were taken back.
  ``alert_id`` is the same from every dispatcher that declares the same death: dedupe by it.

Encoders trust their typed inputs (the decider built them) and do not validate; every decoder
validates against the compiled schema and raises ``SchemaError`` with the reason. Times are
written as RFC 3339 UTC with "Z" and read with ``codec.parse_time`` (the "+00:00" form that
earlier releases wrote reads the same). These records carry no version field: all of them are
v1, and a v2 will add ``schema_version`` (absent = 1) with an upcaster in ``upcasters``.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import datetime
from functools import cache
from typing import Any, NotRequired, TypedDict, cast

import orjson

from es_sched.domain.definitions import NO_LIMITS, TaskLimits
from es_sched.domain.timers import Timer
from es_sched.roster import Presence
from es_sched.serialization.codec import load_record, parse_time
from es_sched.serialization.schemas import Compiled, default_catalog

FAMILY = "records"
# record type -> the version written and read
VERSIONS = {"ready": 1, "timer": 1, "retry": 1, "lease": 1, "liveness": 1, "alert": 1}
_OPTIONS = orjson.OPT_SORT_KEYS | orjson.OPT_UTC_Z


class ReadyRecord(TypedDict):
    """A decoded ready record (the schema guarantees the types)."""

    workflow_id: str
    task_id: str
    name: str  # the task type: the dispatcher's queue and the topic key
    ref: NotRequired[str]
    attempt: NotRequired[int]
    input: NotRequired[dict[str, Any]]
    priority: NotRequired[int]
    resources: NotRequired[dict[str, Any]]
    rate_limit_key: NotRequired[str | None]
    tenant: NotRequired[str | None]
    callback: NotRequired[bool]
    workflow_started_at: NotRequired[datetime | None]
    limits: NotRequired[dict[str, int] | None]  # the TaskDef's rate and concurrency (ADR 13)
    steps_to_end: NotRequired[int]  # steps after it to its workflow's end (ADR 69); absent: 0
    sla: NotRequired[SlaDoc]  # the workflow's tier and deadline (ADR 67)


class SlaDoc(TypedDict):
    """A ready record's ``sla``: the deadline as written (RFC 3339), parsed by ``ready_sla``."""

    tier: str | None
    deadline: str | None
    after: list[str]


@dataclass(frozen=True)
class Retry:
    workflow_id: str
    task_id: str
    attempt: int  # the attempt that failed
    next_attempt: int
    due_at: datetime
    delay_seconds: float


@dataclass(frozen=True)
class HeldLease:
    worker_id: str
    epoch: int
    token: str
    granted_at: datetime
    gpu: int | None = None


@dataclass(frozen=True)
class LeaseRecord:
    task_id: str
    ready: ReadyRecord
    enqueued_at: datetime
    last_epoch: int
    lease: HeldLease | None  # None: the task waits at the head of its queue


@cache
def _compiled(type_: str) -> Compiled:
    return default_catalog().compiled(FAMILY, type_, VERSIONS[type_])


def _object(raw: bytes | None, type_: str) -> dict[str, Any]:
    doc = load_record(raw, f"{type_} record")
    _compiled(type_).require(doc)
    return cast(dict[str, Any], doc)  # the schema made sure it is an object


# -- ready ----------------------------------------------------------------------------------
def encode_ready(
    *,
    workflow_id: str,
    task_id: str,
    ref: str,
    name: str,
    attempt: int,
    input: dict[str, Any],
    priority: int,
    resources: dict[str, Any],
    rate_limit_key: str | None,
    tenant: str | None,
    callback: bool,
    workflow_started_at: datetime | None,
    limits: TaskLimits | None = None,
    steps_to_end: int = 0,
    sla: SlaDoc | None = None,
) -> bytes:
    doc: dict[str, Any] = {
        "workflow_id": workflow_id,
        "task_id": task_id,
        "ref": ref,
        "name": name,
        "attempt": attempt,
        "input": input,
        "priority": priority,
        "resources": resources,
        "rate_limit_key": rate_limit_key,
        "tenant": tenant,
        "callback": callback,
        "workflow_started_at": workflow_started_at,
        "limits": None if limits is None or limits == NO_LIMITS else _limits(limits),
        "steps_to_end": steps_to_end,
    }
    if sla is not None:  # absent, not null: a record without an SLA stays as it was
        doc["sla"] = sla
    return orjson.dumps(doc, option=_OPTIONS)


_LIMITS = tuple(f.name for f in fields(TaskLimits))


def _limits(limits: TaskLimits) -> dict[str, int]:
    """``asdict`` without its deep copy of each field: this runs once per ready record."""
    return {name: getattr(limits, name) for name in _LIMITS}


def ready_limits(doc: ReadyRecord) -> TaskLimits:
    """The TaskDef limits a ready record carries (none when absent: records before ADR 13)."""
    found = doc.get("limits")
    return TaskLimits(**found) if found else TaskLimits()


def ready_sla(doc: ReadyRecord) -> tuple[str | None, datetime | None, tuple[str, ...]]:
    """The tier, deadline and chain after the task a ready record carries (none: no SLA)."""
    found = doc.get("sla")
    if not found:
        return None, None, ()
    deadline = found.get("deadline")
    parsed = parse_time(deadline, "ready.sla.deadline") if deadline is not None else None
    return found.get("tier"), parsed, tuple(found.get("after") or ())


def decode_ready(raw: bytes | None) -> ReadyRecord:
    """One ready record; the dispatcher decodes every one, so this stays lean."""
    doc = load_record(raw, "ready record")
    compiled = _compiled("ready")
    if not compiled.ok(doc):
        compiled.require(doc)
    started = doc.get("workflow_started_at")
    if started is not None:
        doc["workflow_started_at"] = parse_time(started, "ready.workflow_started_at")
    return cast(ReadyRecord, doc)  # validated above


# -- timer ----------------------------------------------------------------------------------
def encode_timer(timer: Timer) -> bytes:
    return orjson.dumps(
        {
            "timer_id": timer.timer_id,
            "workflow_id": timer.workflow_id,
            "kind": timer.kind,
            "task_id": timer.task_id,
            "due_at": timer.due_at,
        },
        option=_OPTIONS,
    )


def decode_timer(raw: bytes | None) -> Timer:
    doc = _object(raw, "timer")
    return Timer(
        timer_id=doc["timer_id"],
        workflow_id=doc["workflow_id"],
        kind=doc["kind"],
        task_id=doc.get("task_id"),
        due_at=parse_time(doc["due_at"], "timer.due_at"),
    )


# -- retry ----------------------------------------------------------------------------------
def encode_retry(retry: Retry) -> bytes:
    return orjson.dumps(retry.__dict__, option=_OPTIONS)


def decode_retry(raw: bytes | None) -> Retry:
    doc = _object(raw, "retry")
    return Retry(
        workflow_id=doc["workflow_id"],
        task_id=doc["task_id"],
        attempt=int(doc["attempt"]),
        next_attempt=int(doc["next_attempt"]),
        due_at=parse_time(doc["due_at"], "retry.due_at"),
        delay_seconds=float(doc["delay_seconds"]),
    )


# -- lease ----------------------------------------------------------------------------------
def encode_lease(record: LeaseRecord) -> bytes:
    held = record.lease
    return orjson.dumps(
        {
            "task_id": record.task_id,
            "ready": record.ready,
            "enqueued_at": record.enqueued_at,
            "last_epoch": record.last_epoch,
            "lease": None if held is None else held.__dict__,
        },
        option=_OPTIONS,
    )


def decode_lease(raw: bytes | None) -> LeaseRecord:
    """One journal record; its ready record is checked against the ready schema too."""
    doc = _object(raw, "lease")
    ready = decode_ready(orjson.dumps(doc["ready"]))
    held = doc["lease"]
    return LeaseRecord(
        task_id=doc["task_id"],
        ready=ready,
        enqueued_at=parse_time(doc["enqueued_at"], "lease.enqueued_at"),
        last_epoch=int(doc["last_epoch"]),
        lease=None
        if held is None
        else HeldLease(
            worker_id=held["worker_id"],
            epoch=int(held["epoch"]),
            token=held["token"],
            granted_at=parse_time(held["granted_at"], "lease.lease.granted_at"),
            gpu=held.get("gpu"),
        ),
    )


# -- alerts (ADR 71) ------------------------------------------------------------------------
class AlertRecord(TypedDict):
    """A decoded alert record (the schema guarantees the types)."""

    alert_id: str
    kind: str
    subject: str
    pool: str
    last_seen: str
    declared_at: str
    declared_by: str
    reclaimed: list[str]
    summary: str


def worker_dead_alert(
    worker_id: str,
    pool: str,
    last_seen: datetime,
    declared_at: datetime,
    declared_by: str,
    reclaimed: tuple[str, ...],
) -> bytes:
    """The ``worker.dead`` alert: one per silence of a worker (``alert_id`` from its last
    heartbeat, so every dispatcher's copy of one death has one id)."""
    seen = last_seen.isoformat()
    summary = f"worker {worker_id} (pool {pool}) silent since {seen}: declared dead"
    if reclaimed:
        summary += f", {len(reclaimed)} lease(s) taken back"
    return orjson.dumps(
        {
            "alert_id": f"worker.dead:{worker_id}:{seen}",
            "kind": "worker.dead",
            "subject": worker_id,
            "pool": pool,
            "last_seen": last_seen,
            "declared_at": declared_at,
            "declared_by": declared_by,
            "reclaimed": list(reclaimed),
            "summary": summary,
        },
        option=_OPTIONS,
    )


def decode_alert(raw: bytes | None) -> AlertRecord:
    return cast(AlertRecord, _object(raw, "alert"))


# -- liveness (ADR 61) ----------------------------------------------------------------------
def encode_liveness(p: Presence) -> bytes:
    """One role process's liveness record on ``<prefix>.system``."""
    return orjson.dumps(
        {
            "deployment": p.deployment,
            "role": p.role,
            "instance": p.instance,
            "host": p.host,
            "pid": p.pid,
            "version": p.version,
            "started_at": p.started_at,
            "seen_at": p.seen_at,
            "partitions": list(p.partitions),
            "lag": p.lag,
            "state": p.state,
        },
        option=_OPTIONS,
    )


def decode_liveness(raw: bytes | None) -> Presence:
    doc = _object(raw, "liveness")
    return Presence(
        deployment=doc["deployment"],
        role=doc["role"],
        instance=doc["instance"],
        host=doc["host"],
        pid=doc["pid"],
        version=doc["version"],
        started_at=parse_time(doc["started_at"], "liveness.started_at"),
        seen_at=parse_time(doc["seen_at"], "liveness.seen_at"),
        partitions=tuple(doc["partitions"]),
        lag=doc["lag"],
        state=doc["state"],
    )
