"""ADR 36: the lean worker routes answer exactly as the FastAPI routes they bypass.

Two applications over identical gateways (held tasks in memory, reports recorded, no broker):
one with ``lean_worker_routes`` (the default), one without. Each request goes to both, in the
same order, and the answers must match: status, content type, body (the clock's fields aside),
the input-id header, and the reports each gateway sent. The requests cover what the lean path
answers itself (polls, updates, refusals after the work started) and what it must hand to
FastAPI (bodies and parameters FastAPI refuses with ``validationErrors``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import pytest
from fastapi.testclient import TestClient
from starlette.responses import PlainTextResponse
from starlette.types import Receive, Scope, Send

from es_sched import bootstrap
from es_sched.api.app import create_app
from es_sched.api.conductor.lean import LeanWorkerRoutes
from es_sched.api.conductor.tasks import INPUT_ID_HEADER, WorkflowNames
from es_sched.domain import commands as c
from es_sched.serialization import wire
from es_sched.settings import ApiSettings, Settings, load_settings
from es_sched.workers.gateway.leases import HeldLease
from es_sched.workers.gateway.worker import Gateway, _Held
from es_sched.workers.reports import Delivery
from tests.unit.api.auth_support import Clock, MemoryKeys, authenticator, key

CLOCK_FIELDS = ("scheduledTime", "startTime", "updateTime")


class Reports:
    """The gateway's ``Reporter``, recording what it would produce."""

    def __init__(self) -> None:
        self.sent: list[Any] = []

    def send(self, inp: Any, delivery: Delivery | None = None) -> None:
        self.sent.append(inp)

    def status(self, record: Any, key: str, delivery: Delivery | None = None) -> None:
        pass

    def wait(self, deliveries: list[Delivery], timeout_s: float) -> int:
        return 0


class Leases:
    """``GatewayStore`` in memory: the rows a poll writes and an update ends."""

    def __init__(self) -> None:
        self.rows: dict[str, HeldLease] = {}
        self.kept: dict[str, list[dict[str, Any]]] = {}

    def ensure(self) -> None:
        pass

    def handed(self, gateway_id: str, http_worker_id: str, tasks: list[wire.Assignment]) -> None:
        for a in tasks:
            self.rows[a.task_id] = HeldLease(
                a.task_id,
                a.workflow_id,
                a.task_type,
                a.attempt,
                a.lease_epoch,
                a.lease_token,
                gateway_id,
                http_worker_id,
                None,
                None,
            )

    def polled(self, task_type: str, domain: str, worker_id: str) -> None:
        pass

    def lease(self, task_id: str) -> HeldLease | None:
        return self.rows.get(task_id)

    def end(
        self, task_id: str, workflow_id: str, http_worker_id: str, outcome: str
    ) -> tuple[HeldLease | None, str | None]:
        row = self.rows.get(task_id)
        if row is None:
            return None, None
        mine = row.workflow_id == workflow_id and http_worker_id in ("", row.http_worker_id)
        if mine and row.lease_over is None and row.ended is None:
            self.rows[task_id] = replace(row, ended=outcome)
            return row, outcome
        return row, row.ended

    def ended_of(self, gateway_id: str, task_ids: list[str]) -> set[str]:
        return set()

    def add_logs(self, task_id: str, lines: list[dict[str, Any]]) -> None:
        self.kept.setdefault(task_id, []).extend(lines)

    def logs(self, task_id: str) -> list[dict[str, Any]]:
        return list(self.kept.get(task_id, []))

    def close(self) -> None:
        pass


@dataclass
class Side:
    client: TestClient
    gateway: Gateway
    reports: Reports


def _side(settings: Settings, lean: bool, keys: MemoryKeys | None = None) -> Side:
    api = settings.api.model_copy(update={"lean_worker_routes": lean})
    svc = bootstrap.api_services(replace(settings, api=api))
    gw = Gateway(svc.settings, Leases(), worker_id="gw")  # type: ignore[arg-type]
    gw.reporter = Reports()  # type: ignore[assignment]
    gw._stale.beat()
    for n in range(3):
        a = wire.Assignment(
            "gw",
            f"wf{n}",
            f"t{n}",
            "transcode",
            1,
            1,
            "tok",
            "2999-01-01",
            {
                "n": n,
                "text": "é ✓",
            },
        )
        gw._waiting[a.task_id] = _Held(a, 0.0)
    svc.gateway.put(gw)
    names = WorkflowNames()
    names.put({f"wf{n}": "media" for n in range(3)})
    svc.workflow_names.put(names)
    if keys is not None:
        svc.auth = authenticator(keys, Clock())
    client = TestClient(create_app(svc), raise_server_exceptions=False)
    return Side(client, gw, gw.reporter)  # type: ignore[arg-type]


def _settings(auth: str = "off") -> Settings:
    base = load_settings()
    api = ApiSettings(auth=auth, jwt_secret="unit-test-jwt-secret-0123456789abcdef")
    return replace(base, api=api)


def _seen(response: Any) -> tuple[Any, ...]:
    kind = response.headers.get("content-type", "")
    body: Any = response.text
    if kind.startswith("application/json"):
        body = response.json()
        for task in body if isinstance(body, list) else [body]:
            for name in CLOCK_FIELDS:
                if isinstance(task, dict) and name in task:
                    task[name] = "<clock>"
    return response.status_code, kind, body, response.headers.get(INPUT_ID_HEADER)


def _result(task_id: str, status: str = "COMPLETED", **extra: Any) -> dict[str, Any]:
    n = task_id[1:]
    return {
        "workflowInstanceId": f"wf{n}",
        "taskId": task_id,
        "status": status,
        "workerId": "w1",
        "outputData": {"ok": True},
        **extra,
    }


def _sans_clock(sent: list[Any]) -> list[Any]:
    """The reports with their log lines' times (taken when each side got them) left out."""
    return [
        replace(r, logs=[{**x, "at": "<clock>"} for x in r.logs]) if hasattr(r, "logs") else r
        for r in sent
    ]


JSON_HEADERS = {"content-type": "application/json"}
STEPS: list[tuple[str, str, dict[str, Any]]] = [
    ("GET", "/api/tasks/poll/batch/transcode?workerid=w1&count=2&timeout=0", {}),
    ("GET", "/api/tasks/poll/batch/other?workerid=w1&timeout=0", {}),
    ("GET", "/api/tasks/poll/batch/transcode?count=abc", {}),
    ("GET", "/api/tasks/poll/batch/transcode?count=0&timeout=0", {}),
    ("GET", "/api/tasks/poll/batch/transcode?timeout=1.5", {}),
    ("GET", "/api/tasks/poll/batch/transcode?workerid=a%00b&timeout=0", {}),
    ("POST", "/api/tasks", {"json": _result("t0")}),
    ("POST", "/api/tasks", {"json": _result("t0")}),  # the SDK's retry: same answer
    ("POST", "/api/tasks", {"json": _result("t0", "FAILED")}),  # another outcome: 409
    ("POST", "/api/tasks", {"json": _result("t9")}),  # never leased: 404
    ("POST", "/api/tasks", {"json": _result("t1", workerId="w2")}),  # someone else's: 409
    ("POST", "/api/tasks", {"content": b"{not json", "headers": JSON_HEADERS}),
    ("POST", "/api/tasks", {"json": {"taskId": "t1", "status": "DONE"}}),
    ("POST", "/api/tasks", {"content": b"{}", "headers": {"content-type": "text/plain"}}),
    ("POST", "/api/tasks", {"content": b"", "headers": JSON_HEADERS}),
    ("POST", "/api/tasks", {"json": _result("t1", callbackAfterSeconds=-1)}),
    ("POST", "/api/tasks/update-v2", {"json": _result("t1", "IN_PROGRESS", logs=[{"log": "x"}])}),
    ("POST", "/api/tasks/t1/log", {"json": "a line"}),  # kept until the outcome (ADR 60)
    ("POST", "/api/tasks/t9/log", {"json": "a line"}),  # never leased: 404
    ("POST", "/api/tasks/update-v2", {"json": _result("t1")}),  # the next task: t2
    ("POST", "/api/tasks/update-v2", {"json": _result("t2")}),  # none left: 204
    ("PUT", "/api/tasks/update-v2", {"json": _result("t2")}),  # not a route: 405 either way
    ("GET", "/api/tasks/poll/batch/", {}),
]


def test_each_request_is_answered_alike_with_and_without_the_lean_routes() -> None:
    settings = _settings()
    lean, full = _side(settings, lean=True), _side(settings, lean=False)
    for method, url, kwargs in STEPS:
        a = _seen(lean.client.request(method, url, **kwargs))
        b = _seen(full.client.request(method, url, **kwargs))
        assert a == b, f"{method} {url}: lean {a} != FastAPI {b}"
    assert [type(r).__name__ for r in lean.reports.sent] == [
        type(r).__name__ for r in full.reports.sent
    ]
    assert _sans_clock(lean.reports.sent) == _sans_clock(full.reports.sent)
    kinds = {type(r).__name__ for r in lean.reports.sent}
    assert {"ReportStarted", "ReportCompleted", "ReportFailed", "ReportProgress"} <= kinds
    # The lines kept while t1 ran (an IN_PROGRESS update's, a POST .../log) go with its outcome.
    (t1,) = [
        r
        for r in lean.reports.sent
        if isinstance(r, c.ReportCompleted) and r.task_id == "t1" and r.worker_id == "gw"
    ]
    assert [x["log"] for x in t1.logs] == ["x", "a line"]


def test_the_lean_routes_admit_as_the_routes_do() -> None:
    """Auth on: no token 401, a viewer 403, a worker 200, each with the same body both ways."""
    keys, clock = MemoryKeys(), Clock()
    settings = _settings(auth="on")
    lean, full = _side(settings, True, keys), _side(settings, False, keys)
    worker, viewer = key(keys, "worker", clock), key(keys, "viewer", clock)
    url = "/api/tasks/poll/batch/transcode?workerid=w1&timeout=0"
    for who in (None, viewer, worker):
        headers = {}
        if who is not None:
            grant = {"keyId": who[0], "keySecret": who[1]}
            token = lean.client.post("/api/token", json=grant).json()["token"]
            headers = {"X-Authorization": token}
        a, b = (
            _seen(lean.client.get(url, headers=headers)),
            _seen(full.client.get(url, headers=headers)),
        )
        assert a == b
        assert a[0] == {None: 401, viewer: 403, worker: 200}[who]


@pytest.mark.parametrize("lean", [True, False])
def test_a_failure_inside_the_work_answers_conductors_error_body(lean: bool) -> None:
    side = _side(_settings(), lean)

    def broken(*_args: Any) -> None:
        raise RuntimeError("store down")

    side.gateway.store.handed = broken  # type: ignore[method-assign, assignment]
    got = side.client.get("/api/tasks/poll/batch/transcode?timeout=0")
    assert got.status_code == 500
    assert got.json() == {
        "status": 500,
        "code": "INTERNAL_ERROR",
        "message": "internal error (RuntimeError); see the API's log",
        "validationErrors": [],
    }


def test_the_lean_routes_answer_without_fastapis_worker_routes() -> None:
    """What proves the comparison above compared two paths: with the application behind the
    lean routes refusing every task route (404), polls and updates are still answered; a
    request the lean routes hand on then meets the refusal."""
    side = _side(_settings(), lean=True)
    side.client.get("/openapi.json")  # builds the middleware stack
    lean = side.client.app.middleware_stack  # type: ignore[attr-defined]
    while not isinstance(lean, LeanWorkerRoutes):
        lean = lean.app
    behind = lean.app

    async def no_task_routes(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].startswith("/api/tasks"):
            await PlainTextResponse("behind", status_code=404)(scope, receive, send)
        else:
            await behind(scope, receive, send)

    lean.app = no_task_routes
    polled = side.client.get("/api/tasks/poll/batch/transcode?workerid=w1&timeout=0")
    assert polled.status_code == 200 and polled.json()[0]["taskId"] == "t0"
    assert side.client.post("/api/tasks", json=_result("t0")).text == "t0"
    after = side.client.post("/api/tasks/update-v2", json=_result("t0"))  # a retry, and the next
    assert after.status_code == 200 and after.json()["taskId"] == "t1"
    assert side.client.get("/api/tasks/poll/batch/transcode?count=x").text == "behind"
