"""Conductor's task resource under ``/api/tasks``: HTTP workers (issue 14 item 1, ADR 24).

Polls take tasks the API process's gateway worker holds (``es_sched.workers.gateway``); updates
become the reports a Kafka worker sends. Shapes are Conductor's (``TaskResource``, the
conductor-python SDK): a batch poll answers a list (``[]`` when nothing came within
``timeout`` ms, capped by ``ES_SCHED_API_LONG_POLL_MAX_MS``), a single poll one ``Task`` or
204, ``POST /api/tasks`` the task id as text, ``update-v2`` the next task or 204. Conductor's
task domains have no counterpart: ``domain`` is recorded in the poll data and matches all.
``POST /api/tasks/{taskId}/log`` keeps a line with the lease until the outcome carries it, and
``GET /api/tasks/{taskId}/log`` answers the lines as ``TaskExecLog``s (ADR 60).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import OrderedDict
from contextlib import suppress
from datetime import UTC, datetime
from typing import Any, Literal

from fastapi import APIRouter, Body, Depends, HTTPException, Query, Request, Response
from fastapi.responses import PlainTextResponse
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import func, select
from sqlalchemy.exc import ProgrammingError, SQLAlchemyError
from starlette.concurrency import run_in_threadpool

from es_sched.api.auth import Principal, require
from es_sched.api.conductor import models
from es_sched.api.errors import ApiError
from es_sched.api.fleet import read_fleet
from es_sched.api.gateway import Gateway, gateway_of
from es_sched.api.services import Services, services
from es_sched.projections.postgres import queries
from es_sched.projections.postgres.models import TASKS, WORKFLOWS
from es_sched.projections.postgres.store import available
from es_sched.serialization import wire
from es_sched.workers import tasklogs
from es_sched.workers.gateway.updates import Answer, Update, apply

log = logging.getLogger(__name__)
router = APIRouter(prefix="/api/tasks", tags=["task"])
JSON = dict[str, Any]
INPUT_ID_HEADER = "X-Es-Sched-Input-Id"
MAX_NAME = 512
NAMES_KEPT = 10_000  # workflow names kept for polls' workflowType
WORKER = require("worker")
VIEWER = require("viewer")


class TaskExecLog(BaseModel):
    """Conductor's ``TaskExecLog``: a line of a task's log and when it was taken (ms)."""

    model_config = ConfigDict(extra="ignore")
    log: str = ""
    taskId: str | None = None
    createdTime: int | None = None


class TaskResult(BaseModel):
    """Conductor's ``TaskResult`` (fields it has and es-sched does not use are ignored)."""

    model_config = ConfigDict(extra="ignore")
    workflowInstanceId: str = Field(min_length=1)
    taskId: str = Field(min_length=1)
    status: Literal["IN_PROGRESS", "COMPLETED", "FAILED", "FAILED_WITH_TERMINAL_ERROR"]
    outputData: JSON = Field(default_factory=dict)
    reasonForIncompletion: str | None = None
    callbackAfterSeconds: int = Field(default=0, ge=0)
    extendLease: bool = False
    logs: list[TaskExecLog] = Field(default_factory=list)
    workerId: str | None = None


def _ms(when: datetime | None = None) -> int:
    return int((when or datetime.now(UTC)).timestamp() * 1000)


def gateway(request: Request, svc: Services = Depends(services)) -> Gateway:  # noqa: B008
    """The dependency: this process's gateway, named after the port the server listens on."""
    server = request.scope.get("server")
    return gateway_of(svc, int(server[1]) if server and server[1] else None)


def _workflow_names(svc: Services, ids: list[str]) -> dict[str, str]:
    """Names from the read model, for ``workflowType``; empty when it cannot say (not
    projected yet, no projector, database down): the poll already took its tasks, so nothing
    here may fail it. A workflow's name never changes, so the names found are kept (the
    ``NAMES_KEPT`` last used): the tasks of one workflow, polled one by one, ask once."""
    names = _names_of(svc)
    found, missing = names.get(ids)
    if not missing:
        return found
    w = WORKFLOWS.c
    try:
        with svc.engine.connect() as conn:
            rows = conn.execute(select(w.workflow_id, w.name).where(w.workflow_id.in_(missing)))
            read = {str(r[0]): str(r[1]) for r in rows}
    except SQLAlchemyError as exc:
        log.warning("workflow names unavailable: %s", exc)
        return found
    names.put(read)
    return found | read


def _names_of(svc: Services) -> WorkflowNames:
    return svc.workflow_names.get(WorkflowNames)


class WorkflowNames:
    """Workflow id -> name, the ``NAMES_KEPT`` last used (shared by the request threads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._names: OrderedDict[str, str] = OrderedDict()

    def get(self, ids: list[str]) -> tuple[dict[str, str], set[str]]:
        with self._lock:
            found = {i: self._names[i] for i in ids if i in self._names}
            for i in found:
                self._names.move_to_end(i)
        return found, set(ids) - found.keys()

    def put(self, names: dict[str, str]) -> None:
        with self._lock:
            self._names.update(names)
            while len(self._names) > NAMES_KEPT:
                self._names.popitem(last=False)


def task_json(a: wire.Assignment, worker_id: str, workflow_type: str) -> JSON:
    """A leased task as Conductor's ``Task`` (``models.Task``, the shape the workflow routes
    answer too; IN_PROGRESS: the poll started it), with the fields only a poll carries."""
    now = _ms()
    task = models.Task(
        taskId=a.task_id,
        taskType=a.task_type,
        taskDefName=a.task_type,
        referenceTaskName=a.ref,
        status="IN_PROGRESS",
        inputData=a.input,
        outputData={},
        retryCount=a.attempt - 1,
        seq=0,
        pollCount=1,
        workerId=worker_id,
        scheduledTime=now,
        startTime=now,
        endTime=0,
        updateTime=now,
        reasonForIncompletion=None,
        workflowInstanceId=a.workflow_id,
        workflowType=workflow_type,
        correlationId=None,
        workflowPriority=a.priority,
        iteration=0,
        retried=a.attempt > 1,
        executed=False,
        callbackAfterSeconds=0,
    )
    return {
        **task.model_dump(),
        "responseTimeoutSeconds": 0,
        "startDelayInSeconds": 0,
        "callbackFromWorker": True,
        "domain": None,
    }


def _name(what: str, value: str) -> str:
    """A task type, worker id, domain or task id as the store can keep it (PostgreSQL text
    holds no NUL), or a 400 saying why."""
    if "\x00" in value or len(value) > MAX_NAME:
        raise ApiError(400, f"{what} must be at most {MAX_NAME} characters, without NUL")
    return value


async def take_tasks(
    svc: Services,
    gw: Gateway,
    task_type: str,
    count: int,
    worker: str,
    domain: str,
    wait_ms: int,
    next_of_update: bool = False,
) -> list[JSON]:
    """Held tasks of ``task_type``, waiting up to ``wait_ms`` for the first to arrive
    (``next_of_update``: ``Gateway.take``'s)."""
    task_type, worker = _name("taskType", task_type), _name("workerid", worker)
    domain = _name("domain", domain)
    if count < 1:
        raise ApiError(400, f"count must be at least 1, got {count}")
    count = min(count, gw.capacity)
    wait_s = min(max(wait_ms, 0), svc.settings.api.long_poll_max_ms) / 1000
    deadline = time.monotonic() + wait_s
    if gw.poll_due(task_type, domain, worker):  # once a second: no thread hand-off otherwise
        await run_in_threadpool(gw.store.polled, task_type, domain, worker)
    loop, arrived = asyncio.get_running_loop(), asyncio.Event()

    def wake() -> None:
        loop.call_soon_threadsafe(arrived.set)

    gw.wake_on_arrival(task_type, wake, on=True)
    try:
        while True:
            arrived.clear()
            claim = gw.claim(task_type, count, worker, next_of_update)  # in memory
            took = await run_in_threadpool(gw.hand, claim, worker) if claim.needs_io else []
            left = deadline - time.monotonic()
            if took or left <= 0:
                break
            with suppress(TimeoutError):  # an arrival, or again within half the demand window
                await asyncio.wait_for(arrived.wait(), min(left, gw.demand_s / 2))
    finally:
        gw.wake_on_arrival(task_type, wake, on=False)
    if not took:
        return []
    ids = [a.workflow_id for a in took]
    names, missing = _names_of(svc).get(ids)  # in memory: a thread only for a miss
    if missing:
        names = await run_in_threadpool(_workflow_names, svc, ids)
    return [task_json(a, worker, names.get(a.workflow_id, "")) for a in took]


@router.get("/poll/batch/{taskType}", summary="Batch poll for tasks of a type (long poll)")
async def batch_poll(
    taskType: str,
    workerid: str = "",
    count: int = 1,
    timeout: int = 100,
    domain: str | None = None,
    svc: Services = Depends(services),  # noqa: B008
    gw: Gateway = Depends(gateway),  # noqa: B008
    _who: Principal = WORKER,
) -> list[JSON]:
    return await take_tasks(svc, gw, taskType, count, workerid, domain or "", timeout)


@router.get("/poll/{taskType}", summary="Poll for one task of a type", response_model=None)
async def poll(
    taskType: str,
    workerid: str = "",
    domain: str | None = None,
    svc: Services = Depends(services),  # noqa: B008
    gw: Gateway = Depends(gateway),  # noqa: B008
    _who: Principal = WORKER,
) -> JSON | Response:
    found = await take_tasks(svc, gw, taskType, 1, workerid, domain or "", 0)
    return found[0] if found else Response(status_code=204)


def apply_result(svc: Services, gw: Gateway, result: TaskResult) -> Answer:
    """``result`` applied as a worker's reports (``updates.apply``); blocks (call off the loop)."""
    for what, value in (
        ("workflowInstanceId", result.workflowInstanceId),
        ("taskId", result.taskId),
        ("workerId", result.workerId or ""),
    ):
        _name(what, value)
    u = Update(
        workflow_id=result.workflowInstanceId,
        task_id=result.taskId,
        status=result.status,
        output=result.outputData,
        reason=result.reasonForIncompletion or "",
        worker_id=result.workerId or "",
        logs=_lines(svc, result.logs),
        callback_after_s=result.callbackAfterSeconds,
    )
    return apply(gw, u, lambda task_id: _attempt(svc, task_id))


def _lines(svc: Services, logs: list[TaskExecLog]) -> list[JSON]:
    """A TaskResult's logs as ``tasklogs`` lines (their own time when they have one), each
    cut to the bound."""
    limit = svc.settings.worker.log_max_chars
    return [
        tasklogs.line(
            tasklogs.cut(x.log, limit),
            _at(x.createdTime),
        )
        for x in logs
        if x.log
    ]


SECONDS_BELOW = 100_000_000_000  # as ms, early 1973: a createdTime below it counts seconds


def _at(created: int | None) -> datetime | None:
    """A line's ``createdTime`` (ms; None, taken now, when absent or not a time). A value
    below ``SECONDS_BELOW`` is read as seconds: conductor-python 2.0.0 times the traceback it
    logs for a raising worker with ``int(time.time())``, its ``add_log`` lines in ms."""
    if not created:
        return None
    try:
        return datetime.fromtimestamp(created / (1 if created < SECONDS_BELOW else 1000), UTC)
    except (OverflowError, OSError, ValueError):
        return None


def _attempt(svc: Services, task_id: str) -> int | None:
    """The task's attempt as the read model has it, for a claim on a task no gateway leased
    (None when it cannot say: the claim is refused either way)."""
    try:
        with svc.engine.connect() as conn:
            found = conn.execute(select(TASKS.c.attempt).where(TASKS.c.task_id == task_id))
            value = found.scalar()
            return int(value) if value is not None else None
    except SQLAlchemyError as exc:
        log.warning("task attempt unavailable: %s", exc)
        return None


async def updated(svc: Services, gw: Gateway, result: TaskResult) -> Answer:
    """``POST /api/tasks``'s work: the accepted update's answer, or the refusal raised as
    Conductor's error body (``errors.answer``) with the id of the claim the decider refuses
    and records, so a caller can find the refusal in the log."""
    answer = await run_in_threadpool(apply_result, svc, gw, result)
    if answer.status != 200:
        raise HTTPException(
            answer.status,
            f"{answer.message}; sent for the record as input {answer.input_id}",
            headers={INPUT_ID_HEADER: answer.input_id},
        )
    return answer


async def next_task(svc: Services, gw: Gateway, result: TaskResult, answer: Answer) -> JSON | None:
    """``update-v2``'s next task after an accepted update: one of the lease's type, taken
    without waiting, or None (none held, or the update was progress: the task goes on)."""
    if answer.task_type is None or result.status == "IN_PROGRESS":
        return None
    worker = result.workerId or ""
    found = await take_tasks(svc, gw, answer.task_type, 1, worker, "", 0, next_of_update=True)
    return found[0] if found else None


@router.post("", summary="Update a task", response_class=PlainTextResponse)
async def update(
    result: TaskResult,
    svc: Services = Depends(services),  # noqa: B008
    gw: Gateway = Depends(gateway),  # noqa: B008
    _who: Principal = WORKER,
) -> PlainTextResponse:
    answer = await updated(svc, gw, result)
    return PlainTextResponse(answer.message, headers={INPUT_ID_HEADER: answer.input_id})


@router.post("/update-v2", summary="Update a task and poll the next one", response_model=None)
async def update_v2(
    result: TaskResult,
    svc: Services = Depends(services),  # noqa: B008
    gw: Gateway = Depends(gateway),  # noqa: B008
    _who: Principal = WORKER,
) -> JSON | Response:
    task = await next_task(svc, gw, result, await updated(svc, gw, result))
    return task if task is not None else Response(status_code=204)


def _waiting(svc: Services, types: list[str]) -> dict[str, int]:
    t = TASKS.c
    query = (
        select(t.name, func.count())
        .where(t.name.in_(types), t.status == "SCHEDULED", t.worker_id.is_(None))
        .group_by(t.name)
    )
    try:
        with available("queue sizes"), svc.engine.connect() as conn:
            counts = {str(r[0]): int(r[1]) for r in conn.execute(query)}
    except ProgrammingError as exc:  # no projector has created the read model yet
        raise ApiError(503, f"the read model cannot count tasks yet: {exc.orig}") from exc
    return {name: counts.get(name, 0) for name in types}


@router.get("/queue/sizes", summary="Tasks waiting for a lease, by type (read model)")
def queue_sizes(
    taskType: list[str] = Query(default_factory=list),  # noqa: B008
    svc: Services = Depends(services),  # noqa: B008
    _who: Principal = VIEWER,
) -> dict[str, int]:
    return _waiting(svc, [_name("taskType", t) for t in taskType]) if taskType else {}


@router.get(
    "/queue/unplaceable",
    summary="Task types with tasks waiting that no worker can take now, and why (es-sched)",
)
def queue_unplaceable(
    taskType: list[str] = Query(default_factory=list),  # noqa: B008
    svc: Services = Depends(services),  # noqa: B008
    _who: Principal = VIEWER,
) -> dict[str, JSON]:
    """Of the given types (``/queue/sizes``'s parameter), those with tasks waiting and no
    eligible worker: ``{"reason": "blacklisted", "message": "pool media: 1 worker, ..."}``
    (ADR 58). The same rule as the queues page and ``es_sched_queue_unplaceable``."""
    waiting = _waiting(svc, [_name("taskType", t) for t in taskType]) if taskType else {}
    fleet = read_fleet(svc) if any(waiting.values()) else None
    out: dict[str, JSON] = {}
    for name, n in waiting.items():
        why = fleet.why_unplaceable(name) if fleet is not None and n else None
        if why is not None:
            out[name] = {"reason": why[0], "message": why[1], "waiting": n}
    return out


@router.get("/queue/polldata", summary="Who polled a task type, and when")
def poll_data(
    taskType: str,
    gw: Gateway = Depends(gateway),  # noqa: B008
    _who: Principal = VIEWER,
) -> list[JSON]:
    rows = gw.store.poll_data(_name("taskType", taskType))
    return [
        {
            "queueName": r["task_type"],
            "domain": r["domain"] or None,
            "workerId": r["worker_id"],
            "lastPollTime": _ms(r["last_poll_at"]),
        }
        for r in rows
    ]


# -- task logs (ADR 60) ---------------------------------------------------------------------
def _exec_log(task_id: str, x: JSON) -> JSON:
    at = x.get("at")
    try:
        created = _ms(datetime.fromisoformat(at)) if isinstance(at, str) else 0
    except ValueError:
        created = 0
    return {"log": str(x.get("log", "")), "taskId": task_id, "createdTime": created}


def task_log(svc: Services, gw: Gateway, task_id: str) -> list[JSON] | None:
    """The task's log lines in Conductor's ``TaskExecLog`` shape: those its outcome carried
    (the archive), else those kept while it runs (the gateway store); None for a task the
    read model does not have and no HTTP worker here leases (a task polled here may not be in
    the read model yet: its lines are answered, as the next read after a POST must see them)."""
    row = queries.task_row(svc.engine, task_id)
    if row is None:
        if gw.store.lease(task_id) is None:
            return None
        return [_exec_log(task_id, x) for x in gw.store.logs(task_id)]
    ended = queries.task_outcomes(svc.engine, str(row["workflow_id"]), [task_id]).get(task_id)
    lines = ended["logs"] if ended is not None else gw.store.logs(task_id)
    return [_exec_log(task_id, x) for x in lines]


@router.get("/{taskId}/log", summary="A task's log lines (Conductor's TaskExecLog)")
def get_task_log(
    taskId: str,
    svc: Services = Depends(services),  # noqa: B008
    gw: Gateway = Depends(gateway),  # noqa: B008
    _who: Principal = VIEWER,
) -> list[JSON]:
    found = task_log(svc, gw, _name("taskId", taskId))
    if found is None:
        raise ApiError(404, f"no task {taskId!r} in the read model (yet)")
    return found


@router.post("/{taskId}/log", summary="Log a line for a running task (kept until its outcome)")
def add_task_log(
    taskId: str,
    line: str = Body(..., media_type="application/json"),
    svc: Services = Depends(services),  # noqa: B008
    gw: Gateway = Depends(gateway),  # noqa: B008
    _who: Principal = WORKER,
) -> Response:
    """Conductor's ``addTaskLog``: the line is kept with the task's lease in the gateway store
    and sent with its outcome (ADR 60), so a line costs no decider input. Only a task an HTTP
    worker polled and has not reported ended takes lines: any other is a 404 or 409 saying
    why (a Kafka worker logs with ``ctx.log``)."""
    lease = gw.store.lease(_name("taskId", taskId))
    if lease is None:
        raise ApiError(404, f"task {taskId} is not leased to an HTTP worker (not polled here)")
    if lease.ended is not None or lease.lease_over is not None:
        why = lease.ended or lease.lease_over
        raise ApiError(409, f"task {taskId} ended ({why}): its log went with its outcome")
    limit = svc.settings.worker.log_max_chars
    gw.store.add_logs(taskId, [tasklogs.line(tasklogs.cut(line, limit))])
    return Response(status_code=200)
