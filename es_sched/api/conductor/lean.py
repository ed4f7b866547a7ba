"""HTTP workers' three hot routes served without FastAPI's machinery (ADR 36).

An HTTP worker's task costs a batch poll and an update (``POST /api/tasks`` or ``update-v2``),
and the API process's CPU per task bounds HTTP workers' throughput; most of it went to
Starlette's and FastAPI's machinery (routing over every route, dependencies each run on the
thread pool, the response model validated and ``jsonable_encoder`` walked over every task's
input; py-spy profiles in ADR 36). This ASGI middleware
answers those three routes itself, doing only what their answers need, and hands every other
request to the application unchanged.

What stays in one place: the routes' work (``tasks.take_tasks``, ``tasks.updated``,
``tasks.next_task``), who may call them (``auth.admitted``), the body's model
(``tasks.TaskResult``) and every error's body (``errors.answer``). The FastAPI routes stay
declared, for ``/openapi.json`` and for ``ES_SCHED_API_LEAN_WORKER_ROUTES=false``.

What the middleware declines to judge it hands on, before anything happened: a request it
cannot parse exactly as FastAPI would (a query value that is not plain digits, a body that is
not JSON or fails ``TaskResult``, a content type FastAPI would not read as JSON) goes to the
application with its body replayed, so a refusal there is FastAPI's, word for word
(``validationErrors`` and all). Once the work starts, a failure is answered here through
``errors.answer``. ``tests/unit/api/test_lean_routes.py`` sends the same requests both ways and
compares the answers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import orjson
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from es_sched.api import errors
from es_sched.api.auth import admitted
from es_sched.api.conductor.tasks import (
    INPUT_ID_HEADER,
    TaskResult,
    next_task,
    take_tasks,
    updated,
)
from es_sched.api.gateway import Gateway, gateway_of
from es_sched.api.services import Services

POLL = "/api/tasks/poll/batch/"
UPDATE, UPDATE_V2 = "/api/tasks", "/api/tasks/update-v2"
INTEGER = re.compile(r"-?[0-9]{1,18}")  # what both parse alike; anything else: FastAPI's call
JSON_TYPE = re.compile(r"application/(json|[a-z0-9.+-]*\+json)")  # FastAPI reads these as JSON


@dataclass(frozen=True)
class _Poll:
    task_type: str
    worker: str
    count: int
    timeout_ms: int
    domain: str


class LeanWorkerRoutes:
    """ASGI middleware: ``GET /api/tasks/poll/batch/{type}``, ``POST /api/tasks`` and ``POST
    /api/tasks/update-v2`` answered here; everything else passed to ``app``."""

    def __init__(self, app: ASGIApp, svc: Services) -> None:
        self.app = app
        self.svc = svc

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        method, path = scope["method"], scope["path"]
        if method == "GET" and path.startswith(POLL) and "/" not in path[len(POLL) :]:
            if len(path) > len(POLL):
                await self._poll(scope, receive, send, path[len(POLL) :])
                return
        elif method == "POST" and path in (UPDATE, UPDATE_V2):
            await self._update(scope, receive, send, next_too=path == UPDATE_V2)
            return
        await self.app(scope, receive, send)

    async def _poll(self, scope: Scope, receive: Receive, send: Send, task_type: str) -> None:
        request = Request(scope, receive)
        poll = _poll_of(request, task_type)
        if poll is None:
            await self.app(scope, receive, send)
            return
        try:
            await self._admit(request)
            gw = await self._gateway(scope)
            took = await take_tasks(
                self.svc,
                gw,
                poll.task_type,
                poll.count,
                poll.worker,
                poll.domain,
                poll.timeout_ms,
            )
            response: Response = _json(took)
        except Exception as exc:  # noqa: BLE001 - every failure gets its error body
            response = errors.answer(request, exc)
        await response(scope, receive, send)

    async def _update(self, scope: Scope, receive: Receive, send: Send, next_too: bool) -> None:
        body = await _body(receive)
        if body is None:  # the client went away before sending it all
            return
        replay = _replaying(body, receive)
        request = Request(scope, replay)
        result = _result_of(request, body)
        if result is None:
            await self.app(scope, replay, send)
            return
        try:
            await self._admit(request)
            gw = await self._gateway(scope)
            answer = await updated(self.svc, gw, result)
            if next_too:
                task = await next_task(self.svc, gw, result, answer)
                response: Response = Response(status_code=204) if task is None else _json(task)
            else:
                response = PlainTextResponse(
                    answer.message, headers={INPUT_ID_HEADER: answer.input_id}
                )
        except Exception as exc:  # noqa: BLE001 - every failure gets its error body
            response = errors.answer(request, exc)
        await response(scope, replay, send)

    async def _admit(self, request: Request) -> None:
        """``require("worker")``'s check; with auth on, off the loop (a key's cache may have
        to be read again from PostgreSQL)."""
        if self.svc.settings.api.auth == "off":
            admitted(request, self.svc, "worker")
        else:
            await run_in_threadpool(admitted, request, self.svc, "worker")

    async def _gateway(self, scope: Scope) -> Gateway:
        found = self.svc.gateway.peek()
        if found is not None:
            return found
        server = scope.get("server")  # the port it listens on, as the ``gateway`` dependency
        port = int(server[1]) if server and server[1] else None
        return await run_in_threadpool(gateway_of, self.svc, port)


def _poll_of(request: Request, task_type: str) -> _Poll | None:
    """The batch poll's parameters (the FastAPI route's defaults), or None to leave the
    request to FastAPI."""
    query = request.query_params
    count, timeout = query.get("count", "1"), query.get("timeout", "100")
    if not (INTEGER.fullmatch(count) and INTEGER.fullmatch(timeout)):
        return None
    return _Poll(
        task_type=task_type,
        worker=query.get("workerid", ""),
        count=int(count),
        timeout_ms=int(timeout),
        domain=query.get("domain") or "",
    )


def _result_of(request: Request, body: bytes) -> TaskResult | None:
    """The body as ``TaskResult`` when FastAPI would read it as JSON and it validates; None
    to leave the request to FastAPI (whose refusal lists what is wrong)."""
    kind = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if not body or not JSON_TYPE.fullmatch(kind):
        return None
    try:
        return TaskResult.model_validate_json(body)
    except ValidationError:
        return None


async def _body(receive: Receive) -> bytes | None:
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


def _replaying(body: bytes, receive: Receive) -> Receive:
    """``receive`` with the body already read given again first (to FastAPI, or to a
    response waiting for a disconnect)."""
    given = False

    async def again() -> Message:
        nonlocal given
        if not given:
            given = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return again


def _json(value: Any) -> Response:
    return Response(orjson.dumps(value), media_type="application/json")
