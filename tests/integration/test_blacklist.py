"""Blacklisting a user can trust (ADR 58), on the real broker with the real worker SDK, decider,
dispatcher and API.

One worker serves ``bl.work``. Terminal input errors (a missing source file, as the media
probe's) never bench it: after six of them a normal task is still placed on that same worker
(the sentinel), and no blacklist record exists. Host faults (``HostFault``) do: after the
window's threshold the dispatcher writes ``blacklist:<worker>`` to the config topic with the
failures that caused it. A restarted dispatcher applies that record (its own
``es_sched_worker_blacklisted`` and ``es_sched_queue_unplaceable`` say so, and a waiting task
stays unplaced), ``/api/v1`` and the queue views say why, and a lift through the API lets the
waiting task run on the worker.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from es_sched.domain.events import TaskFailed
from es_sched.kafka import config_client
from es_sched.workers import HostFault, TaskContext, TaskFailure, Worker
from testkit.api import Api, api
from testkit.net import free_port
from testkit.runtime import Env, Role, final_status, read_events
from testkit.wait import wait_until

pytestmark = pytest.mark.integration
TYPE, WORKER_ID = "bl.work", "bl-worker"
DEFINITION = {
    "name": "bl.flow",
    "version": 1,
    "schemaVersion": 2,
    "ownerEmail": "t@example.com",
    "tasks": [
        {
            "name": TYPE,
            "taskReferenceName": "work",
            "type": "SIMPLE",
            "inputParameters": {"mode": "${workflow.input.mode}"},
        }
    ],
}
TASKDEFS = [{"name": TYPE, "retryCount": 0, "responseTimeoutSeconds": 600}]
# A window of 4, judged from 3 outcomes: the sentinel's success and two host faults bench it.
SETTINGS = {
    "ES_SCHED_DISPATCH_BLACKLIST_WINDOW": "4",
    "ES_SCHED_DISPATCH_BLACKLIST_MIN_OUTCOMES": "3",
    "ES_SCHED_DISPATCH_BLACKLIST_S": "3600",
}


def handle(ctx: TaskContext, task_input: dict[str, Any]) -> dict[str, Any]:
    mode = task_input.get("mode")
    if mode == "bad":
        raise TaskFailure(f"source file:///in/{ctx.workflow_id}.mp4 does not exist", False)
    if mode == "host":
        raise HostFault("scratch volume /tmp/bl is not writable")
    return {"ran_on": ctx.worker_id}


def statuses(env: Env, ids: list[str]) -> dict[str, str]:
    found = read_events(env)
    return {wid: final_status(found.get(wid, [])) for wid in ids}


def ended(env: Env, ids: list[str], status: str) -> None:
    wait_until(
        lambda: set(statuses(env, ids).values()) == {status},
        120,
        lambda: f"{len(ids)} workflows {status}: {statuses(env, ids)}",
    )


def run(env: Env, mode: str, n: int = 1) -> list[str]:
    return [s.workflow_id for s in env.submit("bl.flow", [{"mode": mode}] * n)]


def metrics(port: int) -> str:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    except httpx.HTTPError:
        return ""


@pytest.fixture
def worker(env: Env) -> Iterator[Worker]:
    w = Worker(worker_id=WORKER_ID, concurrency=2, settings=env.settings, heartbeat_s=0.5)
    w.task(TYPE)(handle)
    stop = threading.Event()
    thread = threading.Thread(target=w.run, args=(stop,), daemon=True)
    thread.start()
    wait_until(w.ready.is_set, 30, "the worker")
    yield w
    stop.set()
    thread.join(60)


@pytest.fixture
def env() -> Env:
    e = Env(extra=SETTINGS)
    e.create()
    e.push(DEFINITION, TASKDEFS)
    return e


@pytest.fixture
def stack(env: Env) -> Iterator[Api]:
    with api(env) as a:
        yield a


def test_input_errors_never_bench_a_worker_and_its_own_faults_do_until_lifted(
    env: Env, stack: Api, worker: Worker
) -> None:
    decider, first = Role(env, "decider"), Role(env, "dispatcher")
    projector = Role(env, "projector-pg")  # the queues' read model
    port = free_port()
    second: Role | None = None
    try:
        for r in (decider, first, projector):
            r.wait_log("started", 90)
        # Six terminal input errors, then the sentinel: placed on the same (only) worker.
        ended(env, run(env, "bad", 6), "FAILED")
        sentinel = run(env, "ok")
        ended(env, sentinel, "COMPLETED")
        dispatched = [e for e in read_events(env)[sentinel[0]] if e.type == "task.dispatched"]
        assert [e.payload.worker_id for e in dispatched] == [WORKER_ID]  # type: ignore[attr-defined]
        assert not [k for k in config_client.current(env.settings) if k.startswith("blacklist:")]
        shown = stack.http.get("/api/v1/workers").json()["workers"]
        assert [(w["workerId"], w["blacklisted"]) for w in shown] == [(WORKER_ID, False)]

        # Two host faults after that success: 2 of 3 outcomes, over half: benched.
        faulty = run(env, "host", 2)
        ended(env, faulty, "FAILED")
        key = f"blacklist:{WORKER_ID}"
        wait_until(lambda: key in config_client.current(env.settings), 30, f"the {key} record")
        record = config_client.current(env.settings)[key]
        history = read_events(env)
        faulted = {
            e.payload.task_id
            for wid in faulty
            for e in history[wid]
            if isinstance(e.payload, TaskFailed) and e.payload.host_fault
        }
        assert record["state"] == "blacklisted" and record["outcomes"] == 3
        assert {f["task_id"] for f in record["failures"]} == faulted and len(faulted) == 2
        assert {f["fault"] for f in record["failures"]} == {"host fault"}

        # A restarted dispatcher reads it from the config topic and places nothing on the worker.
        first.stop()
        second = Role(env, "dispatcher", ES_SCHED_RUN_METRICS_PORT=str(port))
        second.wait_log("started", 90)
        line = f'es_sched_worker_blacklisted{{pool="default",worker="{WORKER_ID}"}} 1'
        wait_until(lambda: line in metrics(port), 30, lambda: f"{line}: {metrics(port)}")
        waiting = run(env, "ok")
        labels = f'pool="default",reason="blacklisted",task_type="{TYPE}"'
        unplaceable = f"es_sched_queue_unplaceable{{{labels}}} 1"
        wait_until(lambda: unplaceable in metrics(port), 30, lambda: metrics(port))

        (row,) = stack.http.get("/api/v1/workers").json()["workers"]
        assert row["blacklisted"] is True and row["blacklist"]["why"] == "2 of 3 failed"
        assert {f["taskId"] for f in row["blacklist"]["failures"]} == faulted

        def queue_says() -> str:
            rows = stack.http.get("/api/v1/queues").json()["queues"]
            return " ".join(q["unplaceable"] or "" for q in rows if q["taskType"] == TYPE)

        wait_until(lambda: "blacklisted until" in queue_says(), 30, queue_says)
        assert queue_says().startswith("pool default: 1 worker, blacklisted until ")
        assert queue_says().endswith(": 2 of 3 failed")
        conductor = stack.http.get("/api/tasks/queue/unplaceable", params={"taskType": TYPE})
        assert conductor.json()[TYPE]["reason"] == "blacklisted"
        assert statuses(env, waiting) == {waiting[0]: "RUNNING"}

        # Lifted through the API: the waiting task runs on that worker.
        lifted = stack.http.post(f"/api/v1/workers/{WORKER_ID}/lift")
        assert lifted.status_code == 200, lifted.text
        ended(env, waiting, "COMPLETED")
        (row,) = stack.http.get("/api/v1/workers").json()["workers"]
        assert row["blacklisted"] is False and row["liftedBy"] == "anonymous"
        assert config_client.current(env.settings)[key]["state"] == "lifted"
        assert stack.http.post(f"/api/v1/workers/{WORKER_ID}/lift").status_code == 404
        wait_until(lambda: "es_sched_worker_blacklisted{" not in metrics(port), 30, "the gauge")
    finally:
        for role in (second, first, decider, projector):
            if role is not None:
                role.stop()
