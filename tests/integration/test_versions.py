"""A gradual rollout of a worker version (ADR 70), on the real broker with the real worker SDK,
decider, dispatcher, API and CLI, on a test's private topics.

Two SDK workers serve ``versions.work``: ``old-1`` at version 1.0.0 and ``new-1`` at 2.0.0. An
operator rolls 2.0.0 out at 20% (``POST /api/v1/workers/rollouts``): every task goes to the
side the share routing names for its task id. The analytics role's failure rates are published
with ``es_sched.kafka.stats.publisher``, standing in for that role (built elsewhere): the
candidate failing far more than the current version is stopped by the dispatcher (a
``rollout:`` record citing both rates) and the next tasks all run on 1.0.0; the operator
reverts the stop (``es-sched workers revert-rollout``), a low rate promotes 2.0.0, and the
next tasks all run on it. The ``rollout:`` key's records, in order, are the event sequence."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from es_sched.domain.events import TaskDispatched
from es_sched.domain.learned import FailureRate
from es_sched.kafka import config_client
from es_sched.kafka.clients import read_partition
from es_sched.kafka.stats import publisher
from es_sched.kafka.topics import assignment_topic, ensure_topic
from es_sched.versions import routes_to_candidate
from es_sched.workers import TaskContext, Worker
from testkit.api import api
from testkit.net import free_port
from testkit.runtime import Env, Role, final_status, read_events
from testkit.settings import kafka_connection
from testkit.wait import wait_until

pytestmark = pytest.mark.integration

TYPE, FLOW = "versions.work", "versions.flow"
OLD, NEW = ("old-1", "1.0.0"), ("new-1", "2.0.0")
DEFINITION = {
    "name": FLOW,
    "version": 1,
    "schemaVersion": 2,
    "ownerEmail": "t@example.com",
    "tasks": [{"name": TYPE, "taskReferenceName": "work", "type": "SIMPLE"}],
}
TASKDEFS = [{"name": TYPE, "retryCount": 0, "responseTimeoutSeconds": 600}]
KEY = f"rollout:{TYPE}"


def handle(ctx: TaskContext, task_input: dict[str, Any]) -> dict[str, Any]:
    return {"ran_on": ctx.worker_id}


@pytest.fixture(name="env")
def env_fixture() -> Env:
    e = Env(extra={"ES_SCHED_DISPATCH_VERSION_JUDGE_S": "0.2"})
    e.create()
    e.push(DEFINITION, TASKDEFS)
    partitions = e.settings.dispatch.assignment_partitions
    ensure_topic(kafka_connection(e.bootstrap), assignment_topic(e.prefix, "default"), partitions)
    return e


@pytest.fixture(name="workers")
def workers_fixture(env: Env) -> Iterator[list[Worker]]:
    stop, started = threading.Event(), []
    for worker_id, version in (OLD, NEW):
        w = Worker(
            version=version,
            worker_id=worker_id,
            concurrency=4,
            settings=env.settings,
            heartbeat_s=0.5,
        )
        w.task(TYPE)(handle)
        thread = threading.Thread(target=w.run, args=(stop,), daemon=True)
        thread.start()
        started.append((w, thread))
    for w, _ in started:
        wait_until(w.ready.is_set, 30, f"worker {w.worker_id}")
    yield [w for w, _ in started]
    stop.set()
    for _, thread in started:
        thread.join(60)


def run(env: Env, n: int) -> dict[str, str]:
    """Run ``n`` workflows to their end: task id -> the worker its one task ran on."""
    ids = [s.workflow_id for s in env.submit(FLOW, [{}] * n)]

    def ended() -> bool:
        found = read_events(env)
        return all(final_status(found.get(w, [])) == "COMPLETED" for w in ids)

    wait_until(ended, 120, f"{n} workflows completed")
    found = read_events(env)
    return {
        e.payload.task_id: e.payload.worker_id
        for w in ids
        for e in found[w]
        if isinstance(e.payload, TaskDispatched)
    }


def rates(env: Env, candidate: tuple[int, int], current: tuple[int, int]) -> None:
    """Publish the two versions' failure rates as the analytics role would (a window that
    ends now): (outcomes, failures) of each."""
    publish, end = (
        publisher(kafka_connection(env.bootstrap), env.topics.stats),
        datetime.now(UTC).isoformat(),
    )
    for version, (outcomes, failures) in ((NEW[1], candidate), (OLD[1], current)):
        publish(FailureRate("version", TYPE, version, end, outcomes, failures, failures / outcomes))


def state(env: Env) -> str:
    return str(config_client.current(env.settings).get(KEY, {}).get("state"))


def rollout_records(env: Env) -> list[dict[str, Any]]:
    msgs = read_partition(kafka_connection(env.bootstrap), env.topics.config, 0)
    values = [m.value() for m in msgs if m.key() == KEY.encode()]
    return [json.loads(v) for v in values if v is not None]


def test_a_rollout_is_stopped_by_a_high_failure_rate_and_promoted_by_a_low_one(
    env: Env, workers: list[Worker]
) -> None:
    port = free_port()
    decider = Role(env, "decider")
    dispatcher = Role(env, "dispatcher", ES_SCHED_RUN_METRICS_PORT=str(port))
    try:
        for role in (decider, dispatcher):
            role.wait_log("started", 90)
        with api(env) as stack:
            body = {"taskType": TYPE, "candidate": NEW[1], "current": OLD[1], "share": 0.2}
            started = stack.http.post("/api/v1/workers/rollouts", json=body)
            assert started.status_code == 200, started.text
            assert started.json()["given"] == 0.2

            # Rolling at 20%: each of 40 tasks on the side its id routes to.
            rolling = run(env, 40)
            assert len(rolling) == 40
            expected = {t: NEW[0] if routes_to_candidate(t, 0.2) else OLD[0] for t in rolling}
            assert rolling == expected
            given = sum(w == NEW[0] for w in rolling.values())
            assert 0 < given < 40  # none at all: 0.8 ** 40, about 1 in 7,500 runs

            # The candidate fails 12 of 20, the current 4 of 80: stopped.
            rates(env, candidate=(20, 12), current=(80, 4))
            wait_until(lambda: state(env) == "stopped", 30, lambda: f"stopped: {state(env)}")
            after_stop = run(env, 10)
            assert set(after_stop.values()) == {OLD[0]}
            shown = stack.http.get("/api/v1/workers").json()
            (row,) = shown["rollouts"]
            assert (row["state"], row["given"], row["seenCandidate"]["failures"]) == (
                "stopped",
                0.0,
                12,
            )
            assert row["by"].startswith("dispatcher-")

            # The operator reverts the stop with the CLI; a low failure rate promotes 2.0.0.
            env.cli("workers", "revert-rollout", TYPE, "--by", "ops-alice")
            wait_until(lambda: state(env) == "rolling", 30, "the revert")
            rates(env, candidate=(20, 1), current=(80, 4))
            wait_until(lambda: state(env) == "promoted", 30, lambda: f"promoted: {state(env)}")
            after_promotion = run(env, 5)
            assert set(after_promotion.values()) == {NEW[0]}
            assert stack.http.post(f"/api/v1/workers/rollouts/{TYPE}/revert").status_code == 200
            assert stack.http.post(f"/api/v1/workers/rollouts/{TYPE}/revert").status_code == 409

        metrics = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
        for decision in ("rollout stopped", "rollout promoted"):
            line = f'decision="{decision}",task_type="{TYPE}",version="{NEW[1]}"}} 1'
            assert line in metrics, metrics

        records = rollout_records(env)
        assert [(r["state"], r["given"], r.get("reverted")) for r in records] == [
            ("rolling", 0.2, None),
            ("stopped", 0.0, None),
            ("rolling", 0.2, "stopped"),
            ("promoted", 1.0, None),
            ("rolling", 0.2, "promoted"),
        ]
        print("\nrollout of", NEW[1], "for", TYPE, "against", OLD[1])
        print(f"  dispatched while rolling: {given} of {len(rolling)} tasks to {NEW[1]}")
        print(f"  after the stop: {len(after_stop)} of {len(after_stop)} to {OLD[1]}")
        print(
            f"  after the promotion: {len(after_promotion)} of {len(after_promotion)} to {NEW[1]}"
        )
        for r in records:
            seen = r.get("seen")
            figures = "".join(
                f"  seen {v} {seen[side]['failures']}/{seen[side]['outcomes']}"
                f" ({seen[side]['failure_rate']:.0%})"
                for side, v in (("candidate", NEW[1]), ("current", OLD[1]))
                if seen
            )
            print(
                f"  {r['at']}  {r['state']:<8} given {r['given']:.0%} (share {r['share']:.0%})"
                f"  by {r['by']}{figures}"
                + (f"  reverted {r['reverted']}" if "reverted" in r else "")
            )
        print(env.cli("workers", "versions"))
    finally:
        for role in (dispatcher, decider):
            role.stop()
