"""HTTP workers through the API's gateway worker (ADR 24), on a live stack: ``es-sched api``
child processes next to a decider, a dispatcher and the PostgreSQL projector.

- an HTTP worker batch-polls and completes every task of a workflow, which completes;
- a batch poll on a type nobody schedules answers ``[]`` once its timeout passed;
- the same update sent twice is one outcome in the log, answered alike;
- an update from a worker that does not hold the lease is refused (409) and the refusal is in
  the log, as the ``task.completion_rejected`` caused by the input id the answer names;
- two API processes: a task polled from one is completed through the other;
- a task leased to the gateway that no HTTP worker polls within the demand window is declined
  (``worker.task_declined`` -> ``task.lease_expired``): with ``retryCount 0`` a later poll
  still takes attempt 1 and the workflow completes;
- the real conductor-python SDK (``TaskHandler`` with a ``worker_task`` function) completes a
  workflow against ``es-sched api``.
Every test ends on the log's invariants. The tests that only submit and check share one
system (``shared``: the roles and one API process on the module's topics), after those that
need their own settings or a second API process and start their own, so that no two systems
of this module run at once.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from es_sched.domain.events import Event
from testkit.api import Api, api
from testkit.runtime import (
    Env,
    assert_log_invariants,
    final_status,
    read_events,
    roles,
)
from testkit.wait import wait_until

pytestmark = pytest.mark.integration
JSON = dict[str, Any]
FAST = {
    "ES_SCHED_DISPATCH_HEARTBEAT_S": "0.5",
    "ES_SCHED_DISPATCH_LEASE_K": "4",
    "ES_SCHED_DISPATCH_TICK_MS": "50",
}
CHAIN = {
    "name": "http_chain",
    "version": 1,
    "tasks": [
        {"name": "http.a", "taskReferenceName": "a"},
        {"name": "http.b", "taskReferenceName": "b", "inputParameters": {"x": "${a.output.x}"}},
    ],
}
TASKDEFS = [
    {"name": n, "retryCount": 0, "responseTimeoutSeconds": 600} for n in ("http.a", "http.b")
]
REJECTED = "task.completion_rejected"
ROLES = ("decider", "dispatcher", "projector-pg")


def _env() -> Env:
    env = Env(extra=dict(FAST))
    env.create()
    env.push(CHAIN, TASKDEFS)
    return env


@dataclass
class Shared:
    """The module's running system, and every workflow its tests started (the invariants are
    checked over the whole log: none lost, none invented)."""

    env: Env
    server: Api
    ids: set[str] = field(default_factory=set)

    def start(self, inputs: Sequence[dict[str, Any]]) -> list[str]:
        started = [s.workflow_id for s in self.env.submit("http_chain", inputs)]
        self.ids.update(started)
        return started


@pytest.fixture(scope="module")
def shared() -> Iterator[Shared]:
    env = _env()
    with roles(env, *ROLES, **FAST), api(env, **FAST) as server:
        yield Shared(env, server)


def poll_one(server: Api, task_type: str, worker: str, within_s: float = 60) -> JSON:
    """Batch-poll until one task of ``task_type`` comes (each poll waits up to 2 s)."""
    found: list[JSON] = []

    def got() -> bool:
        r = server.http.get(
            f"/api/tasks/poll/batch/{task_type}",
            params={"workerid": worker, "count": 1, "timeout": 2000},
        )
        assert r.status_code == 200, r.text
        found.extend(r.json())
        return bool(found)

    wait_until(got, within_s, f"a {task_type} task for {worker}")
    return found[0]


def result(task: JSON, worker: str, status: str = "COMPLETED", **extra: Any) -> JSON:
    return {
        "workflowInstanceId": task["workflowInstanceId"],
        "taskId": task["taskId"],
        "status": status,
        "workerId": worker,
        **extra,
    }


def events_of(env: Env, wf: str) -> list[Event]:
    return read_events(env).get(wf, [])


def ended(env: Env, wf: str) -> bool:
    return final_status(events_of(env, wf)) != "RUNNING"


def test_a_task_polled_on_one_api_process_is_completed_through_another() -> None:
    env = _env()
    with roles(env, *ROLES, **FAST), api(env, **FAST) as one, api(env, **FAST) as two:
        [wf] = [s.workflow_id for s in env.submit("http_chain", [{}])]
        a = poll_one(one, "http.a", "w1")
        done = two.http.post("/api/tasks", json=result(a, "w1", outputData={"x": 2}))
        assert (done.status_code, done.text) == (200, a["taskId"])
        b = poll_one(two, "http.b", "w2")
        assert b["inputData"] == {"x": 2}
        assert one.http.post("/api/tasks", json=result(b, "w2")).status_code == 200
        wait_until(lambda: ended(env, wf), 60, "the workflow's end")
        started = {
            e.payload.task_id: e.payload.worker_id  # type: ignore[attr-defined]
            for e in events_of(env, wf)
            if e.type == "task.started"
        }
        assert started[a["taskId"]] != started[b["taskId"]], "one gateway per API process"
        assert final_status(events_of(env, wf)) == "COMPLETED"
    assert_log_invariants(env, {wf})


def test_a_task_no_http_worker_polled_is_declined_and_a_later_poll_completes_attempt_1() -> None:
    """ADR 24 a. The gateway's heartbeat (2 s) outlasts the demand window (1 s), so it often
    declines a lease younger than the dispatcher's grace: the re-queued ready record then
    comes while the dispatcher still holds the task, which only its reading of the
    ``task.lease_expired`` re-queues (else the requeue timer, minutes away)."""
    fast = {**FAST, "ES_SCHED_DISPATCH_HEARTBEAT_S": "2"}
    env = Env(extra=dict(fast))
    env.create()
    env.push(CHAIN, TASKDEFS)
    with (
        roles(env, *ROLES, **fast),
        api(env, **fast, ES_SCHED_API_GATEWAY_DEMAND_S="1") as server,
    ):
        [wf] = [s.workflow_id for s in env.submit("http_chain", [{}])]

        def of(kind: str) -> list[Event]:
            return [e for e in events_of(env, wf) if e.type == kind]

        wait_until(lambda: bool(of("task.scheduled")), 60, "task a scheduled")
        scheduled = of("task.scheduled")[0].payload.task_id  # type: ignore[attr-defined]
        once = server.http.get(
            "/api/tasks/poll/batch/http.a", params={"workerid": "w1", "count": 4, "timeout": 1}
        )
        assert (once.status_code, once.json()) == (200, [])  # then this worker stops polling
        wait_until(lambda: bool(of("task.lease_expired")), 60, "the gateway's decline")
        [expired] = of("task.lease_expired")
        assert not expired.causation_id.startswith("expire:"), "the dispatcher's own expiry"
        [leased] = of("task.dispatched")  # to the gateway, which no HTTP worker took it from
        assert leased.payload.worker_id.startswith("api-gateway-")  # type: ignore[attr-defined]
        a = poll_one(server, "http.a", "w1")
        assert (a["taskId"], a["retryCount"]) == (scheduled, 0)  # attempt 1, no retry spent
        done = server.http.post("/api/tasks", json=result(a, "w1", outputData={"x": 1}))
        assert done.status_code == 200, done.text
        b = poll_one(server, "http.b", "w1")
        assert server.http.post("/api/tasks", json=result(b, "w1")).status_code == 200
        wait_until(lambda: ended(env, wf), 60, "the workflow's end")
        assert final_status(events_of(env, wf)) == "COMPLETED"
        assert of("task.failed") == []
        attempts = {
            e.payload.attempt  # type: ignore[attr-defined]
            for e in of("task.dispatched")
            if e.payload.task_id == scheduled  # type: ignore[attr-defined]
        }
        assert attempts == {1}
    assert_log_invariants(env, {wf})


def test_http_workers_across_two_api_processes_on_one_port_complete_every_task() -> None:
    """``es-sched api --workers 2``: each process's gateway has its own worker id (they shared
    one, and the tasks leased to the gateway without the assignments partition were stranded:
    bench/api_workers.py hung with 2 API workers). Fresh connections reach either process."""
    env = _env()
    tasks = 12
    branches = [[{"name": "http.a", "taskReferenceName": f"t{i}"}] for i in range(tasks)]
    fork = {
        "name": "http_fork",
        "version": 1,
        "tasks": [
            {
                "name": "fork",
                "taskReferenceName": "fork",
                "type": "FORK_JOIN",
                "forkTasks": branches,
            },
            {
                "name": "join",
                "taskReferenceName": "join",
                "type": "JOIN",
                "joinOn": [f"t{i}" for i in range(tasks)],
            },
        ],
    }
    env.push(fork, TASKDEFS)
    with roles(env, *ROLES, **FAST), api(env, **FAST, ES_SCHED_API_WORKERS="2") as server:
        started = re.compile(r"gateway worker (\S+) started")

        def both_gateways() -> bool:  # a poll on a new connection builds its process's gateway
            r = httpx.get(
                f"{server.url}/api/tasks/poll/batch/http.a",
                params={"workerid": "w0", "count": 1, "timeout": 0},
                timeout=30,
            )
            assert (r.status_code, r.json()) == (200, []), r.text  # nothing submitted yet
            return len(started.findall(server.role.text())) >= 2

        wait_until(both_gateways, 60, lambda: f"two gateways started:\n{server.role.text()}")
        ids = started.findall(server.role.text())
        assert len(set(ids)) == len(ids) == 2, f"one gateway worker id per API process: {ids}"
        [wf] = [s.workflow_id for s in env.submit("http_fork", [{}])]

        def work() -> bool:
            with httpx.Client(base_url=server.url, timeout=30) as http:  # a new connection
                got = http.get(
                    "/api/tasks/poll/batch/http.a",
                    params={"workerid": "w1", "count": 4, "timeout": 500},
                )
                assert got.status_code == 200, got.text
                for t in got.json():
                    done = http.post("/api/tasks", json=result(t, "w1"))
                    assert done.status_code == 200, done.text
            return ended(env, wf)

        wait_until(work, 120, lambda: f"the fork's end; events: {len(events_of(env, wf))}")
        history = events_of(env, wf)
    assert final_status(history) == "COMPLETED"
    gateways = {e.payload.worker_id for e in history if e.type == "task.started"}  # type: ignore[attr-defined]
    assert all(g.startswith("api-gateway-") for g in gateways), gateways
    assert gateways <= set(ids), gateways
    assert_log_invariants(env, {wf})


def test_an_http_worker_completes_a_workflow(shared: Shared) -> None:
    env, server = shared.env, shared.server
    [wf] = shared.start([{}])
    a = poll_one(server, "http.a", "w1")
    assert (a["status"], a["taskType"], a["workflowInstanceId"]) == (
        "IN_PROGRESS",
        "http.a",
        wf,
    )
    assert (a["referenceTaskName"], a["workerId"], a["retryCount"]) == ("a", "w1", 0)
    progress = result(
        a,
        "w1",
        "IN_PROGRESS",
        callbackAfterSeconds=5,
        logs=[{"log": "half way", "taskId": a["taskId"]}],
    )
    assert server.http.post("/api/tasks", json=progress).status_code == 200
    done = server.http.post("/api/tasks", json=result(a, "w1", outputData={"x": 7}))
    assert (done.status_code, done.text) == (200, a["taskId"])
    assert done.headers["content-type"].startswith("text/plain")
    b = poll_one(server, "http.b", "w1")
    assert b["inputData"] == {"x": 7}
    r = server.http.post("/api/tasks/update-v2", json=result(b, "w1", outputData={"y": 1}))
    assert r.status_code == 204, r.text  # no further http.b task
    wait_until(lambda: ended(env, wf), 60, "the workflow's end")
    types = [e.type for e in events_of(env, wf)]
    assert "task.progressed" in types
    progressed = [e for e in events_of(env, wf) if e.type == "task.progressed"]
    assert progressed[0].payload.message == "half way"  # type: ignore[attr-defined]
    polldata = server.http.get("/api/tasks/queue/polldata", params={"taskType": "http.a"})
    assert ("http.a", "w1") in [(p["queueName"], p["workerId"]) for p in polldata.json()]
    assert_log_invariants(env, shared.ids)


def test_a_batch_poll_on_an_empty_queue_answers_an_empty_list_after_its_timeout(
    shared: Shared,
) -> None:
    server = shared.server
    r = server.http.get(
        "/api/tasks/poll/batch/nobody.schedules.this",
        params={"workerid": "w", "count": 3, "timeout": 300},
    )
    assert (r.status_code, r.json()) == (200, [])
    assert r.elapsed.total_seconds() >= 0.3  # it waited out its timeout
    one = server.http.get("/api/tasks/poll/nobody.schedules.this", params={"workerid": "w"})
    assert one.status_code == 204
    sizes = server.http.get("/api/tasks/queue/sizes", params={"taskType": ["nobody.x"]})
    assert sizes.json() == {"nobody.x": 0}


def test_a_retried_update_is_one_outcome_and_a_forged_one_is_refused_and_recorded(
    shared: Shared,
) -> None:
    env, server = shared.env, shared.server
    [wf] = shared.start([{}])
    a = poll_one(server, "http.a", "w1")
    forged = server.http.post("/api/tasks", json=result(a, "intruder", outputData={"x": 0}))
    assert forged.status_code == 409, forged.text
    assert forged.json()["code"] == "CONFLICT" or forged.json()["status"] == 409
    assert "leased to worker 'w1'" in forged.json()["message"]
    claim = forged.headers["X-Es-Sched-Input-Id"]
    first = server.http.post("/api/tasks", json=result(a, "w1", outputData={"x": 1}))
    again = server.http.post("/api/tasks", json=result(a, "w1", outputData={"x": 1}))
    assert (first.status_code, first.text) == (again.status_code, again.text) == (200, a["taskId"])
    assert first.headers["X-Es-Sched-Input-Id"] == again.headers["X-Es-Sched-Input-Id"]
    other = server.http.post("/api/tasks", json=result(a, "w1", "FAILED"))
    assert other.status_code == 409 and "already reported COMPLETED" in other.text
    unknown = dict(result(a, "w1"), taskId="no-such-task")
    assert server.http.post("/api/tasks", json=unknown).status_code == 404
    bad = server.http.post("/api/tasks", json=result(a, "w1", "SCHEDULED"))
    assert bad.status_code == 400

    def rejected() -> list[Event]:
        found = events_of(env, wf)
        return [e for e in found if e.type == REJECTED and e.causation_id == claim]

    wait_until(lambda: bool(rejected()), 60, "the forged update's refusal in the log")
    assert rejected()[0].payload.worker_id == "intruder"  # type: ignore[attr-defined]
    b = poll_one(server, "http.b", "w1")
    assert server.http.post("/api/tasks", json=result(b, "w1")).status_code == 200
    wait_until(lambda: ended(env, wf), 60, "the workflow's end")
    outcomes = [
        e
        for e in events_of(env, wf)
        if e.type == "task.completed" and e.payload.task_id == a["taskId"]  # type: ignore[attr-defined]
    ]
    assert len(outcomes) == 1
    assert_log_invariants(env, shared.ids)


def test_the_conductor_python_sdk_worker_completes_a_workflow(
    shared: Shared, capfd: pytest.CaptureFixture[str]
) -> None:
    from conductor.client.automator.task_handler import TaskHandler  # noqa: PLC0415
    from conductor.client.configuration.configuration import Configuration  # noqa: PLC0415

    env = shared.env
    config = Configuration(server_api_url=f"{shared.server.url}/api", debug=True)
    handler = TaskHandler(
        workers=[],
        configuration=config,
        scan_for_annotated_workers=True,
        import_modules=["tests.integration.conductor_sdk_workers"],
    )
    ids = shared.start([{}, {}])
    handler.start_processes()
    try:
        wait_until(lambda: all(ended(env, wf) for wf in ids), 120, "both workflows' ends")
    finally:
        handler.stop_processes()
    statuses = {wf: final_status(events_of(env, wf)) for wf in ids}
    assert set(statuses.values()) == {"COMPLETED"}, statuses
    history = [e for wf in ids for e in events_of(env, wf)]
    started = {e.payload.worker_id for e in history if e.type == "task.started"}  # type: ignore[attr-defined]
    assert all(w.startswith("api-gateway-") for w in started), started
    b_inputs = [e for e in history if e.type == "task.completed"]
    assert len(b_inputs) == 4
    out, err = capfd.readouterr()
    lines = (out + err).splitlines()
    assert not [x for x in lines if "update-task-v2 endpoint" in x], "the SDK fell back to v1"
    with capfd.disabled():  # the SDK's own account (its debug lines on polls and updates)
        for line in lines:
            if any(w in line for w in ("Conductor Worker", "Updated task", "ERROR", "WARNING")):
                print("SDK:", line)
    assert_log_invariants(env, shared.ids)
