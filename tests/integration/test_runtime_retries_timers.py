"""Retries and timers through the whole runtime: decider + retry relay + timer service."""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any

import pytest
from confluent_kafka import TopicPartition

from es_sched.domain.events import Event
from es_sched.kafka.clients import consumer
from tests.integration.runtime_harness import (
    Env,
    Worker,
    count_records,
    final_status,
    read_events,
    roles,
)
from tests.support.settings import BOOTSTRAP
from tests.support.wait import wait_until

pytestmark = pytest.mark.integration
RETRIES = 5
FLAKY = {
    "name": "flaky_fanout",
    "version": 1,
    "tasks": [
        {"name": "prep", "taskReferenceName": "prep", "type": "SIMPLE"},
        {
            "name": "fan",
            "taskReferenceName": "fan",
            "type": "FORK_JOIN",
            "forkTasks": [
                [{"name": "work", "taskReferenceName": f"w{i}", "type": "SIMPLE"}] for i in range(3)
            ],
        },
        {"name": "join", "taskReferenceName": "join", "type": "JOIN", "joinOn": ["w0", "w1", "w2"]},
        {"name": "finish", "taskReferenceName": "finish", "type": "SIMPLE"},
    ],
}
TASKDEFS = [
    {"name": n, "retryCount": RETRIES, "retryLogic": "FIXED", "retryDelaySeconds": 1}
    for n in ("prep", "work", "finish")
]


def thirty_percent(task: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    digest = hashlib.sha256(f"{task['task_id']}:{task['attempt']}".encode()).digest()
    return ("FAILED", {}) if digest[0] % 10 < 3 else ("COMPLETED", {"n": task["attempt"]})


def _attempts(events: list[Event]) -> dict[str, int]:
    out: dict[str, int] = {}
    for e in events:
        if e.type == "task.scheduled":
            ref = str(getattr(e.payload, "ref", ""))
            out[ref] = max(out.get(ref, 0), int(getattr(e.payload, "attempt", 1)))
    return out


def test_thirty_percent_failures_retry_only_through_the_retry_topic() -> None:
    env = Env(extra={"ES_SCHED_RUN_RETRY_RELEASE_PER_S": "500"})
    env.create()
    env.push(FLAKY, TASKDEFS)
    n = 60
    with roles(env, "decider", "retry"), Worker(env, thirty_percent) as worker:
        env.submit("flaky_fanout", [{} for _ in range(n)])
        wait_until(
            lambda: (
                len([v for v in read_events(env).values() if final_status(v) != "RUNNING"]) == n
            ),
            180,
            "every workflow to end",
        )
    by_wf = read_events(env)
    failures = sum(status == "FAILED" for _, _, status in worker.executions)
    assert failures / len(worker.executions) > 0.2  # the storm really happened
    retry_events = sum(e.type == "task.retry_scheduled" for v in by_wf.values() for e in v)
    extra_attempts = sum(a - 1 for v in by_wf.values() for a in _attempts(v).values())
    assert retry_events == extra_attempts > 0
    assert all(a <= RETRIES + 1 for v in by_wf.values() for a in _attempts(v).values())
    retry_records = sum(
        count_records(env.topics.retry(t), "read_committed") for t in env.topics.retry_tiers
    )
    assert retry_records == extra_attempts
    timer_kinds = read_timer_kinds(env)
    assert "retry" not in timer_kinds  # retries never go through the timers topic
    for v in by_wf.values():
        assert [e.seq for e in v] == list(range(1, len(v) + 1))


def read_timer_kinds(env: Env) -> set[str]:
    cons = consumer(BOOTSTRAP, None, **{"enable.partition.eof": True})
    cons.assign([TopicPartition(env.topics.timers, p, 0) for p in range(env.partitions)])
    kinds: set[str] = set()
    eof: set[int] = set()
    deadline = time.monotonic() + 30
    while len(eof) < env.partitions and time.monotonic() < deadline:
        for msg in cons.consume(500, 0.5):
            err = msg.error()
            if err is not None:
                eof.add(msg.partition() or 0)
            elif msg.value():
                kinds.add(json.loads(msg.value() or b"{}")["kind"])
    cons.close()
    return kinds


WAITING = {
    "name": "wait_then_flaky",
    "version": 1,
    "tasks": [
        {
            "name": "pause",
            "taskReferenceName": "pause",
            "type": "WAIT",
            "inputParameters": {"duration": "5s"},
        },
        {"name": "flaky", "taskReferenceName": "flaky", "type": "SIMPLE"},
    ],
}


def fail_first_attempt(task: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    return ("FAILED", {}) if task["attempt"] == 1 else ("COMPLETED", {"attempt": task["attempt"]})


def test_a_wait_and_a_retry_delay_survive_restarts_of_their_roles() -> None:
    env = Env()
    env.create()
    env.push(
        WAITING, [{"name": "flaky", "retryCount": 2, "retryLogic": "FIXED", "retryDelaySeconds": 4}]
    )
    with roles(env, "decider"), Worker(env, fail_first_attempt):
        with roles(env, "timers"):
            [wf] = [s.workflow_id for s in env.submit("wait_then_flaky", [{}])]
            wait_until(
                lambda: bool(read_timer_kinds(env)), 30, "the WAIT timer on the timers topic"
            )
        sent = time.monotonic()  # the timer role is down while the WAIT comes due
        time.sleep(6)
        assert final_status(read_events(env)[wf]) == "RUNNING"
        with roles(env, "timers"):
            wait_until(
                lambda: any(e.type == "task.retry_scheduled" for e in read_events(env)[wf]),
                30,
                "the WAIT to end and flaky to fail",
            )
        # the retry relay was not running when the retry was requested; it starts after the delay
        time.sleep(5)
        assert final_status(read_events(env)[wf]) == "RUNNING"
        with roles(env, "retry"):
            wait_until(
                lambda: final_status(read_events(env)[wf]) == "COMPLETED", 60, "the retried attempt"
            )
    events = read_events(env)[wf]
    waited = next(
        e
        for e in events
        if e.type == "task.completed"
        and getattr(e.payload, "task_id", "") == _task_id(events, "pause")
    )
    scheduled = next(e for e in events if e.type == "task.scheduled")
    assert (waited.occurred_at - scheduled.occurred_at).total_seconds() >= 5
    assert _attempts(events)["flaky"] == 2
    assert time.monotonic() - sent > 10


def _task_id(events: list[Event], ref: str) -> str:
    return next(
        str(getattr(e.payload, "task_id", ""))
        for e in events
        if e.type == "task.scheduled" and getattr(e.payload, "ref", "") == ref
    )
