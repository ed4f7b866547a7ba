"""Records between the dispatcher and workers (ADR 5), as JSON with a ``kind`` and a version.

- ``assignment`` (dispatcher -> worker, ``<prefix>.assignments[.<pool>]``, key = worker id):
  the task to run, its lease (epoch, token), the GPU device to pin and the ready record's input.
- ``cancel`` (dispatcher -> worker, same topic and key): stop a task (preemption or
  cancellation); the worker ends it and hands it back without reporting a failure.
- ``worker_status`` (worker -> dispatcher, compacted ``<prefix>.worker-status``, key = worker
  id): capacity, use, GPUs, version, labels, the types it serves and the task ids it runs. Sent
  every heartbeat; it is the heartbeat. A tombstone means the worker left.
- ``progress`` (worker -> dispatcher, same topic, key = worker id + "/" + task id, not
  compacted away while running): percent and message of one running task.
Worker reports that change workflow state (started, completed, failed) go to
``<prefix>.task-results`` as decider inputs (``worker.task_*``), never here.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import orjson

from es_sched.errors import SchemaError

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


def encode(record: Record) -> bytes:
    return orjson.dumps({"wire_version": WIRE_VERSION, **asdict(record)})


def decode(raw: bytes | None) -> Record:
    try:
        doc = orjson.loads(raw or b"")
    except orjson.JSONDecodeError as exc:
        raise SchemaError(f"not JSON: {exc}") from None
    if not isinstance(doc, dict) or doc.pop("wire_version", None) != WIRE_VERSION:
        raise SchemaError("not a dispatcher/worker record of wire_version 1")
    cls = _KINDS.get(str(doc.get("kind")))
    if cls is None:
        raise SchemaError(f"unknown record kind {doc.get('kind')!r}")
    if cls is WorkerStatus:
        doc["gpus"] = [GpuStatus(**g) for g in doc.get("gpus", [])]
    try:
        record: Record = cls(**doc)
    except TypeError as exc:
        raise SchemaError(f"{doc.get('kind')}: {exc}") from None
    return record


def assignment_topic(prefix: str, pool: str) -> str:
    return f"{prefix}.assignments" if pool == "default" else f"{prefix}.assignments.{pool}"
