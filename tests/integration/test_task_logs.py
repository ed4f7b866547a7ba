"""Task logs and failure tracebacks on a live stack (ADR 60): real Kafka and PostgreSQL, a
decider, a dispatcher, the PostgreSQL projector and ``es-sched api``, one system for the module.

- a native worker: a handler's ``ctx.log`` lines, and a raising handler's traceback and whole
  reason, served by ``GET /api/tasks/{taskId}/log`` (Conductor's ``TaskExecLog`` shape) and
  ``GET /api/v1/tasks/{taskId}/log``, shown on the task panel and (the reason) in the list;
- the real conductor-python 2.0.0 SDK: a worker's ``add_log`` lines, and the traceback the SDK
  logs for a raising worker;
- an HTTP worker's ``POST /api/tasks/{taskId}/log`` lines, readable while the task runs, go
  with its outcome together with its ``TaskResult`` logs; a line after the end is refused.
Each test ends on the audit's checks over the whole log (I5: deciding the recorded inputs
again gives the recorded events, logs and tracebacks included).
"""

from __future__ import annotations

import html
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from es_sched import bootstrap
from es_sched.audit.check import check
from es_sched.audit.read import read_log
from es_sched.workers import TaskContext
from testkit.api import Api, api
from testkit.runtime import Env, final_status, read_events, roles
from testkit.wait import wait_until
from tests.integration.worker_harness import Running, make_worker

pytestmark = pytest.mark.integration
JSON = dict[str, Any]
FAST = {
    "ES_SCHED_DISPATCH_HEARTBEAT_S": "0.5",
    "ES_SCHED_DISPATCH_LEASE_K": "4",
    "ES_SCHED_DISPATCH_TICK_MS": "50",
}
TYPES = ("native.log", "native.raise", "sdk.logs", "sdk.raise", "http.log")
REASON = (
    "cannot write /scratch/ep1042/720p.mp4: no space left on device (errno 28) while "
    "writing segment 17 of 40; 0 bytes free on /scratch"
)


def _flow(task_type: str) -> JSON:
    return {
        "name": f"flow.{task_type}",
        "version": 1,
        "tasks": [
            {
                "name": task_type,
                "taskReferenceName": "only",
                "inputParameters": {"clip": "${workflow.input.clip}", "n": "${workflow.input.n}"},
            }
        ],
    }


@dataclass
class System:
    env: Env
    server: Api
    ids: set[str] = field(default_factory=set)

    def run(self, task_type: str, task_input: JSON | None = None) -> str:
        [started] = self.env.submit(f"flow.{task_type}", [task_input or {}])
        self.ids.add(started.workflow_id)
        return started.workflow_id

    def ended(self, wf: str) -> str:
        def done() -> bool:
            return final_status(read_events(self.env).get(wf, [])) != "RUNNING"

        wait_until(done, 120, f"the end of {wf}")
        return final_status(read_events(self.env)[wf])

    def task_id(self, wf: str) -> str:
        events = read_events(self.env)[wf]
        return next(str(e.payload.task_id) for e in events if e.type == "task.scheduled")  # type: ignore[attr-defined]

    def log(self, task_id: str, lines: int) -> list[JSON]:
        """``GET /api/tasks/{taskId}/log`` once the read model has the outcome's lines."""
        found: list[JSON] = []

        def got() -> bool:
            r = self.server.http.get(f"/api/tasks/{task_id}/log")
            assert r.status_code in (200, 404), r.text
            found[:] = r.json() if r.status_code == 200 else []
            return len(found) >= lines

        wait_until(got, 60, f"{lines} log lines of {task_id}")
        return found

    def audited(self) -> None:
        report = check(read_log(self.env.settings), False, bootstrap.script_engine())
        assert report.ok, "\n".join(v.line() for v in report.violations[:20])
        assert self.ids <= set(report.states)


@pytest.fixture(scope="module")
def system() -> Iterator[System]:
    env = Env(extra=dict(FAST))
    env.create()
    for t in TYPES:
        env.push(_flow(t), [{"name": t, "retryCount": 0, "responseTimeoutSeconds": 600}])
    worker = make_worker(env.settings)

    @worker.task("native.log")
    def logs(ctx: TaskContext, task_input: JSON) -> JSON:
        for n in range(3):
            ctx.log(f"native line {n} of {task_input['clip']}")
        return {"ok": True}

    @worker.task("native.raise")
    def explode(ctx: TaskContext, _input: JSON) -> JSON:
        ctx.log("about to write the rendition")
        raise OSError(REASON)

    with (
        roles(env, "decider", "dispatcher", "projector-pg", **FAST),
        api(env, **FAST) as server,
        Running(worker),
    ):
        yield System(env, server)


def _recent(created_ms: int) -> bool:
    return abs(created_ms / 1000 - time.time()) < 3600


def test_a_native_worker_s_lines_and_traceback_are_served_and_shown(system: System) -> None:
    ok, bad = system.run("native.log", {"clip": "a.mp4"}), system.run("native.raise")
    assert (system.ended(ok), system.ended(bad)) == ("COMPLETED", "FAILED")
    ok_task, bad_task = system.task_id(ok), system.task_id(bad)
    lines = system.log(ok_task, 3)
    assert [x["log"] for x in lines] == [f"native line {n} of a.mp4" for n in range(3)]
    assert all(x["taskId"] == ok_task and _recent(x["createdTime"]) for x in lines)
    assert [x["log"] for x in system.log(bad_task, 1)] == ["about to write the rendition"]

    native = system.server.http.get(f"/api/v1/tasks/{bad_task}/log").json()
    assert (native["status"], native["ended"], native["reason"]) == (
        "FAILED",
        True,
        f"OSError: {REASON}",
    )
    assert native["traceback"].startswith("Traceback (most recent call last):")
    assert "in explode" in native["traceback"]
    assert native["traceback"].endswith(f"OSError: {REASON}\n")

    panel = system.server.http.get(f"/ui/workflows/{bad}/tasks/only").text
    assert html.escape(f"OSError: {REASON}", quote=False) in panel
    assert '<pre class="log traceback">Traceback' in panel
    assert "about to write the rendition" in panel
    panel = system.server.http.get(f"/ui/workflows/{ok}/tasks/only").text
    assert "native line 2 of a.mp4" in panel
    listed = system.server.http.get("/ui/", params={"name": "flow.native.raise"}).text
    assert REASON in listed, "the list shows the whole reason"
    system.audited()


def test_a_conductor_sdk_worker_s_logs_and_traceback_are_served(system: System) -> None:
    from conductor.client.automator.task_handler import TaskHandler  # noqa: PLC0415
    from conductor.client.configuration.configuration import Configuration  # noqa: PLC0415
    from conductor.client.worker.worker import Worker  # noqa: PLC0415

    from tests.integration import conductor_sdk_log_workers as sdk  # noqa: PLC0415

    handler = TaskHandler(
        workers=[
            Worker("sdk.logs", sdk.logs_two_lines, poll_interval=50),
            Worker("sdk.raise", sdk.raises, poll_interval=50),
        ],
        configuration=Configuration(server_api_url=f"{system.server.url}/api"),
        scan_for_annotated_workers=False,
    )
    ok, bad = system.run("sdk.logs", {"n": 7}), system.run("sdk.raise")
    handler.start_processes()
    try:
        assert (system.ended(ok), system.ended(bad)) == ("COMPLETED", "FAILED")
    finally:
        handler.stop_processes()
    lines = system.log(system.task_id(ok), 2)
    assert [x["log"] for x in lines] == ["sdk line one of 7", "sdk line two"]
    assert all(_recent(x["createdTime"]) for x in lines)
    [trace] = system.log(system.task_id(bad), 1)
    assert "RuntimeError: sdk worker broke" in trace["log"]
    assert _recent(trace["createdTime"]), "the SDK's time in seconds read as such"
    system.audited()


def test_an_http_worker_s_lines_go_with_its_outcome(system: System) -> None:
    http = system.server.http
    wf = system.run("http.log")
    found: list[JSON] = []

    def polled() -> bool:
        r = http.get("/api/tasks/poll/batch/http.log", params={"workerid": "h1", "timeout": 2000})
        found.extend(r.json())
        return bool(found)

    wait_until(polled, 60, "the http.log task")
    task_id = found[0]["taskId"]
    assert http.post(f"/api/tasks/{task_id}/log", json="line A").status_code == 200
    running = http.get(f"/api/tasks/{task_id}/log").json()
    assert [x["log"] for x in running] == ["line A"], "read while the task runs"
    done = http.post(
        "/api/tasks",
        json={
            "workflowInstanceId": wf,
            "taskId": task_id,
            "status": "COMPLETED",
            "workerId": "h1",
            "logs": [{"log": "line B", "createdTime": int(time.time() * 1000)}],
        },
    )
    assert done.status_code == 200, done.text
    assert system.ended(wf) == "COMPLETED"
    lines = system.log(task_id, 2)
    assert [x["log"] for x in lines] == ["line A", "line B"]
    late = http.post(f"/api/tasks/{task_id}/log", json="too late")
    assert late.status_code == 409 and "went with its outcome" in late.text
    assert http.post("/api/tasks/nope/log", json="x").status_code == 404
    assert http.get("/api/tasks/nope/log").status_code == 404
    system.audited()
