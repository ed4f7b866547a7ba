"""Records between the dispatcher and workers (ADR 5), as JSON with a ``kind`` and
``wire_version`` 1; schemas ``schemas/wire/<kind>.v1.json``. Both sides import these classes.

- ``assignment`` (dispatcher -> worker, ``<prefix>.assignments[.<pool>]``, key = worker id):
  the task to run, its lease (epoch, token), the GPU device to pin and the ready record's input.
  The token is sealed to the worker's ``lease_key`` (``es_sched.serialization.sealed``, ADR 74):
  the other workers reading the same partition cannot echo it.
  It carries the dispatcher's deployment id (ADR 63): a worker of another deployment
  dead-letters it and never runs it.
- ``cancel`` (dispatcher -> worker, same topic and key): stop a task (preemption or
  cancellation); the worker ends it and hands it back without reporting a failure.
- ``worker_status`` (worker -> dispatcher, compacted ``<prefix>.worker-status``, key = worker
  id): capacity, use, GPUs, version, labels, the types it serves and the task ids it runs. Sent
  every heartbeat; it is the heartbeat. A tombstone means the worker left. Its deployment id:
  a dispatcher of another deployment leaves the worker out of its fleet. Its ``lease_key``: the
  key its tokens are sealed to.
- ``progress`` (worker -> dispatcher, same topic, key = worker id + "/" + task id, not
  compacted away while running): percent and message of one running task.
Worker reports that change workflow state (started, completed, failed) go to
``<prefix>.task-results`` as decider inputs (``worker.task_*``), never here.

``encode`` writes every field (the classes are built from typed values, not validated again);
``decode`` validates against the compiled schema of the record's kind and raises
``SchemaError`` with the reason (times are checked with ``codec.parse_time`` but stay ISO 8601
strings in the classes; ``sent_time`` reads a report's). A v2 of a kind will raise
``wire_version`` and add an upcaster.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from functools import cache
from typing import Any

import orjson

from es_sched.errors import SchemaError
from es_sched.serialization.codec import load_record, parse_time
from es_sched.serialization.schemas import Compiled, default_catalog

FAMILY = "wire"
WIRE_VERSION = 1


@dataclass(frozen=True)
class Assignment:
    worker_id: str
    workflow_id: str
    task_id: str
    task_type: str
    attempt: int
    lease_epoch: int
    lease_token: str
    lease_expires_at: str  # ISO 8601
    input: dict[str, Any]
    gpu: int | None = None
    priority: int = 4
    resources: dict[str, Any] = field(default_factory=dict)
    ref: str = ""
    # The dispatcher's deployment (ADR 63): a worker of another one refuses the task. Empty:
    # written before the stamp existed, taken as a match.
    deployment: str = ""
    kind: str = "assignment"


@dataclass(frozen=True)
class Cancel:
    worker_id: str
    task_id: str
    lease_epoch: int
    reason: str  # "preempted" | "canceled" | "lease expired"
    kind: str = "cancel"


@dataclass(frozen=True)
class GpuStatus:
    index: int
    total_mb: int
    free_mb: int
    name: str = ""


@dataclass(frozen=True)
class WorkerStatus:
    worker_id: str
    pool: str
    version: str
    types: list[str]
    cpu: float
    memory_mb: int
    gpus: list[GpuStatus] = field(default_factory=list)
    custom: dict[str, float] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    running: list[str] = field(default_factory=list)  # task ids, running or queued here
    concurrency: int = 1
    used: dict[str, Any] = field(default_factory=dict)  # declared needs of ``running``, summed
    sent_at: str = ""  # ISO 8601
    deployment: str = ""  # the worker's (ADR 63): a dispatcher of another one ignores it
    # The public half of the key its lease tokens are sealed to (ADR 74), new each process;
    # empty: a worker that cannot open sealed tokens.
    lease_key: str = ""
    kind: str = "worker_status"


@dataclass(frozen=True)
class Progress:
    worker_id: str
    task_id: str
    lease_epoch: int
    percent: float
    message: str = ""
    sent_at: str = ""
    kind: str = "progress"


Record = Assignment | Cancel | WorkerStatus | Progress
_KINDS: dict[str, type[Any]] = {
    "assignment": Assignment,
    "cancel": Cancel,
    "worker_status": WorkerStatus,
    "progress": Progress,
}


VERSIONS = dict.fromkeys(_KINDS, WIRE_VERSION)  # kind -> the version written and read


@cache
def _compiled(kind: str) -> Compiled:
    return default_catalog().compiled(FAMILY, kind, VERSIONS[kind])


def encode(record: Record) -> bytes:
    """The fields in their order, nested ``GpuStatus`` written by orjson itself: the bytes of
    ``asdict``, whose deep copy of a task's input was 7% of the roles' CPU (issue 15)."""
    return orjson.dumps({"wire_version": WIRE_VERSION, **record.__dict__})


def decode(raw: bytes | None) -> Record:
    """One record of the assignments or worker-status topics (the dispatcher decodes every
    heartbeat: one compiled check, then the dataclass)."""
    doc = load_record(raw, "dispatcher/worker record")
    kind = doc.get("kind") if isinstance(doc, dict) else None
    cls = _KINDS.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise SchemaError(f"unknown dispatcher/worker record kind {kind!r}")
    if doc.get("wire_version") != WIRE_VERSION:
        raise SchemaError(f"{kind}: wire_version {doc.get('wire_version')!r} is not 1")
    compiled = _compiled(kind)
    if not compiled.ok(doc):
        compiled.require(doc)
    del doc["wire_version"]
    if cls is WorkerStatus:
        doc["gpus"] = [GpuStatus(**g) for g in doc["gpus"]]
    when = doc.get("sent_at") or doc.get("lease_expires_at")
    if when:  # a valid time, though kept as text; the pattern-free schema leaves it to here
        parse_time(when, f"{kind} time")
    record: Record = cls(**doc)
    return record


def sent_time(record: WorkerStatus | Progress) -> datetime | None:
    """When the worker sent ``record``; None for a report that does not say."""
    return parse_time(record.sent_at, f"{record.kind}.sent_at") if record.sent_at else None
