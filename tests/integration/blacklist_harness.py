"""The blacklist tests' system (ADR 58): one SDK worker serving ``media.transcode``, whose handler
fails as the input says (``bad``: a terminal input error, ``host``: a ``HostFault``, else it
completes), in pool ``media``, on a test's private topics with a small blacklist window."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from es_sched.kafka import config_client
from es_sched.kafka.topics import assignment_topic, ensure_topic
from es_sched.workers import HostFault, TaskContext, TaskFailure, Worker
from testkit.api import Api, api
from testkit.runtime import Env, final_status, read_events
from testkit.settings import kafka_connection
from testkit.wait import wait_until

TYPE, WORKER_ID, POOL = "media.transcode", "media-1", "media"
FLOW = "media.encode"
DEFINITION = {
    "name": FLOW,
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
        raise HostFault("scratch volume /var/tmp/media is not writable: EROFS")
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
    return [s.workflow_id for s in env.submit(FLOW, [{"mode": mode}] * n)]


def metrics(port: int) -> str:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    except httpx.HTTPError:
        return ""


@pytest.fixture(name="worker")
def worker_fixture(env: Env) -> Iterator[Worker]:
    w = Worker(
        pool=POOL, worker_id=WORKER_ID, concurrency=2, settings=env.settings, heartbeat_s=0.5
    )
    w.task(TYPE)(handle)
    stop = threading.Event()
    thread = threading.Thread(target=w.run, args=(stop,), daemon=True)
    thread.start()
    wait_until(w.ready.is_set, 30, "the worker")
    yield w
    stop.set()
    thread.join(60)


@pytest.fixture(name="env")
def env_fixture() -> Env:
    e = Env(extra=SETTINGS)
    e.create()
    e.push(DEFINITION, TASKDEFS)
    config_client.publish(e.settings, f"pool:{TYPE}", {"pool": POOL})
    # the pool's assignments topic, which the dispatcher would make only once it runs
    partitions = e.settings.dispatch.assignment_partitions
    ensure_topic(kafka_connection(e.bootstrap), assignment_topic(e.prefix, POOL), partitions)
    return e


@pytest.fixture(name="stack")
def stack_fixture(env: Env) -> Iterator[Api]:
    with api(env) as a:
        yield a
