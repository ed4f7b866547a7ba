"""Timers and retries against the real broker, first each role alone, then the whole runtime.

- The timer service alone (in a thread): every timer fires once, at or after its due time, and
  a restarted service restores the pending timers from its topic.
- The retry relay alone (in a thread): due retries are released once each, at the capped rate.
- Through the whole runtime (decider, timers and retry roles as processes, the test as every
  worker): failed attempts come back only through the retry topics, never the timers topic; a
  WAIT and a retry delay that come due while their role is down fire when it is back.

Each test gets its own topic prefix (so its own topics, groups and transactional ids). What the
roles emitted is read back with ``read_committed`` to the topic's end after they stopped, so
"exactly once" is an exact count, not a wait for silence.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from confluent_kafka import Message

from es_sched.domain.commands import FireTimer
from es_sched.domain.events import Event, TaskRetryScheduled
from es_sched.kafka import clients
from es_sched.kafka.dead_letters import header_map
from es_sched.kafka.topics import Topics, ensure_topics, topics_for
from es_sched.runtime.retry_relay import RetryRelay
from es_sched.runtime.timer_service import TimerService
from es_sched.serialization.codec import decode_input
from es_sched.serialization.records import decode_timer
from es_sched.settings import Settings
from testkit.kafka import Reader, read_to_end, require_kafka
from testkit.runtime import (
    Env,
    Worker,
    count_records,
    final_status,
    read_events,
    roles,
)
from testkit.settings import BOOTSTRAP, kafka_connection, private_settings
from testkit.wait import wait_until

pytestmark = pytest.mark.integration


# -- helpers ------------------------------------------------------------------------------------
def private(**env: str) -> tuple[Settings, Topics]:
    """Settings and created topics under a fresh prefix, two partitions."""
    require_kafka()
    settings = private_settings(partitions=2, assignment_partitions=2, **env)
    topics = topics_for(settings)
    ensure_topics(kafka_connection(BOOTSTRAP), topics)
    return settings, topics


@contextmanager
def running(role: TimerService | RetryRelay) -> Iterator[None]:
    """Run a role in a thread; stop it and re-raise its error on the way out."""
    stop, errors = threading.Event(), list[BaseException]()

    def target() -> None:
        try:
            role.run(stop)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test thread below
            errors.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(60)
        assert not thread.is_alive(), "role did not stop within 60 s"
    if errors:
        raise errors[0]


def fires(records: list[Message]) -> list[FireTimer]:
    out = []
    for msg in records:
        inp = decode_input(msg.value() or b"")
        assert isinstance(inp, FireTimer)
        out.append(inp)
    return out


def ms(at: datetime) -> int:
    return int(at.timestamp() * 1000)


def timers_due(topics: Topics) -> dict[str, datetime]:
    """The due time of every live timer record, by kind."""
    timers = (decode_timer(m.value()) for m in read_to_end(topics.timers) if m.value())
    return {timer.kind: timer.due_at for timer in timers}


def live_timers(topics: Topics) -> tuple[int, dict[str, bytes]]:
    """How many timer records were written, and the timers still live once each key's last
    record (a tombstone deletes) is taken, as compaction will."""
    armed, live = 0, dict[str, bytes]()
    for m in read_to_end(topics.timers):
        key = (m.key() or b"").decode()
        if m.value() is None:
            live.pop(key, None)
        else:
            armed += 1
            live[key] = m.value() or b""
    return armed, live


def attempts(events: list[Event]) -> dict[str, int]:
    out: dict[str, int] = {}
    for e in events:
        if e.type == "task.scheduled":
            ref = str(getattr(e.payload, "ref", ""))
            out[ref] = max(out.get(ref, 0), int(getattr(e.payload, "attempt", 1)))
    return out


def has_passed(at: datetime) -> bool:
    return datetime.now(UTC) > at


# -- the timer service alone --------------------------------------------------------------------
def test_timers_fire_once_at_their_time_and_survive_a_restart() -> None:
    settings, topics = private()
    t0 = datetime.now(UTC)
    p = clients.producer(kafka_connection(BOOTSTRAP))

    def write(name: str, kind: str, task_id: str | None, due_s: float) -> tuple[str, datetime]:
        due = t0 + timedelta(seconds=due_s)
        doc = {
            "timer_id": f"timer-{name}",
            "workflow_id": f"wf-{name}",
            "kind": kind,
            "task_id": task_id,
            "due_at": due.isoformat(),
        }
        p.produce(topics.timers, key=f"timer-{name}", value=json.dumps(doc).encode())
        return f"timer:timer-{name}:{due.isoformat()}", due

    expected = {
        "wf-a": (*write("a", "wait", "task-a", 2), "wait", "task-a"),
        "wf-b": (*write("b", "workflow_timeout", None, 3), "workflow_timeout", None),
    }
    write("hour", "total_timeout", "task-h", 3600)
    write("r", "response_timeout", "task-r", 1)
    expected["wf-r"] = (*write("r", "response_timeout", "task-r", 4), "response_timeout", "task-r")
    write("d", "wait", "task-d", 1.5)
    p.produce(topics.timers, key="timer-d", value=None)
    p.produce(topics.timers, key="timer-bad", value=b"{not json")
    assert p.flush(30) == 0

    commands = Reader(topics.commands)
    try:
        with running(TimerService(settings)):
            wait_until(lambda: len(commands.read()) >= 1, 30, "the first timer to fire")
        with running(TimerService(settings)):  # a restart: state comes back from the topic
            wait_until(
                lambda: {f.workflow_id for f in fires(commands.read())} >= set(expected),
                30,
                lambda: f"every due timer to fire (fired: {len(commands.messages)})",
            )
    finally:
        commands.close()

    records = read_to_end(topics.commands)
    fired = fires(records)
    assert sorted(f.input_id for f in fired) == sorted(e[0] for e in expected.values())
    for fire, msg in zip(fired, records, strict=True):
        input_id, due, kind, task_id = expected[fire.workflow_id]
        assert (fire.kind, fire.task_id, fire.due_at) == (kind, task_id, due)
        assert msg.key() == fire.workflow_id.encode()
        assert msg.timestamp()[1] >= ms(due), f"{input_id} fired early"
    (r_msg,) = [m for m, f in zip(records, fired, strict=True) if f.workflow_id == "wf-r"]
    assert r_msg.timestamp()[1] >= ms(t0 + timedelta(seconds=4))

    live: dict[bytes, bytes | None] = {}
    for msg in read_to_end(topics.timers):
        live[msg.key() or b""] = msg.value()
    assert {k for k, v in live.items() if v is not None} == {b"timer-hour"}
    (letter,) = read_to_end(topics.dead_letters)  # once, although restored twice
    headers = header_map(letter)
    assert (letter.key(), letter.value()) == (b"timer-bad", b"{not json")
    assert (headers["origin.topic"], headers["error.role"]) == (topics.timers, "timer-service")


# -- the retry relay alone ----------------------------------------------------------------------
def test_retry_relay_releases_due_retries_once_at_the_capped_rate() -> None:
    settings, topics = private(ES_SCHED_RUN_RETRY_RELEASE_PER_S="20")
    tier = topics.retry(5)
    commands, dead = Reader(topics.commands), Reader(topics.dead_letters)
    garbage: list[Message] = []
    try:
        with running(RetryRelay(settings)):
            due = datetime.now(UTC) + timedelta(seconds=1)
            p = clients.producer(kafka_connection(BOOTSTRAP))
            p.produce(
                tier, key="wf-0", value=b"\x00garbage", on_delivery=lambda e, m: garbage.append(m)
            )
            for i in range(50):
                doc = {
                    "workflow_id": f"wf-{i}",
                    "task_id": f"task-{i}",
                    "attempt": 1,
                    "next_attempt": 2,
                    "due_at": due.isoformat(),
                    "delay_seconds": 1.0,
                }
                p.produce(tier, key=f"wf-{i}", value=json.dumps(doc).encode())
            assert p.flush(30) == 0
            wait_until(lambda: len(commands.read()) >= 50, 60, "50 released retries")
            wait_until(lambda: len(dead.read()) >= 1, 30, "the garbage's dead letter")
    finally:
        commands.close()
        dead.close()

    records = read_to_end(topics.commands)
    fired = fires(records)
    assert sorted(f.input_id for f in fired) == sorted(f"retry:task-{i}:2" for i in range(50))
    assert all(f.kind == "retry" and f.due_at == due for f in fired)
    stamps = sorted(m.timestamp()[1] for m in records)
    assert stamps[0] >= ms(due), "released before due"
    # 20 tokens at the due time, then 20/s: the 50th needs 1.5 s more (10 ms for ms rounding).
    span_s = (stamps[-1] - ms(due)) / 1000
    assert span_s >= 1.49, f"rate not capped: 50 released within {span_s:.3f} s"
    print(
        f"\nretry relay: 50 released {span_s:.3f} s after due; after the burst of 20, "
        f"{30 / ((stamps[-1] - stamps[19]) / 1000):.1f}/s"
    )

    (letter,) = read_to_end(topics.dead_letters)
    headers = header_map(letter)
    (original,) = garbage
    assert letter.value() == b"\x00garbage" and letter.key() == b"wf-0"
    assert headers["origin.topic"] == tier
    assert headers["origin.partition"] == str(original.partition())
    assert headers["origin.offset"] == str(original.offset())
    assert headers["error.role"] == "retry-relay" and headers["error.class"] == "SchemaError"


# -- through the whole runtime ------------------------------------------------------------------
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
FLAKY_TASKDEFS = [
    {"name": n, "retryCount": RETRIES, "retryLogic": "FIXED", "retryDelaySeconds": 1}
    for n in ("prep", "work", "finish")
]


def thirty_percent(task: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    digest = hashlib.sha256(f"{task['task_id']}:{task['attempt']}".encode()).digest()
    return ("FAILED", {}) if digest[0] % 10 < 3 else ("COMPLETED", {"n": task["attempt"]})


def test_thirty_percent_failures_retry_only_through_the_retry_topic() -> None:
    env = Env(extra={"ES_SCHED_RUN_RETRY_RELEASE_PER_S": "500"})
    env.create()
    env.push(FLAKY, FLAKY_TASKDEFS)
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
    extra_attempts = sum(a - 1 for v in by_wf.values() for a in attempts(v).values())
    assert retry_events == extra_attempts > 0
    assert all(a <= RETRIES + 1 for v in by_wf.values() for a in attempts(v).values())
    retry_records = sum(
        count_records(env, env.topics.retry(t), "read_committed") for t in env.topics.retry_tiers
    )
    assert retry_records == extra_attempts
    assert "retry" not in timers_due(env.topics)  # retries never go through the timers topic
    for v in by_wf.values():
        assert [e.seq for e in v] == list(range(1, len(v) + 1))
    # ADR 42: every timer armed (requeue timers of each queued attempt at least) was cleared
    # when its task or workflow ended, so none will come back as a timer.fired input.
    armed, live = live_timers(env.topics)
    assert armed >= len(worker.executions) and live == {}, (armed, list(live)[:5])


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
            wait_until(lambda: "wait" in timers_due(env.topics), 30, "the WAIT timer")
        # the timer role is down while the WAIT comes due
        wait_due = timers_due(env.topics)["wait"]
        wait_until(lambda: has_passed(wait_due), 30, "the WAIT's due time, timer role down")
        assert final_status(read_events(env)[wf]) == "RUNNING"
        with roles(env, "timers"):
            wait_until(
                lambda: any(e.type == "task.retry_scheduled" for e in read_events(env)[wf]),
                30,
                "the WAIT to end and flaky to fail",
            )
        # the retry relay was not running when the retry was requested; it starts after the delay
        [retry] = [e.payload for e in read_events(env)[wf] if e.type == "task.retry_scheduled"]
        assert isinstance(retry, TaskRetryScheduled)
        wait_until(lambda: has_passed(retry.due_at), 30, "the retry's due time, relay down")
        assert final_status(read_events(env)[wf]) == "RUNNING"
        with roles(env, "retry"):
            wait_until(
                lambda: final_status(read_events(env)[wf]) == "COMPLETED", 60, "the retried attempt"
            )
    events = read_events(env)[wf]
    pause_id = task_id(events, "pause")
    waited = next(
        e
        for e in events
        if e.type == "task.completed" and getattr(e.payload, "task_id", "") == pause_id
    )
    scheduled = next(e for e in events if e.type == "task.scheduled")
    assert (waited.occurred_at - scheduled.occurred_at).total_seconds() >= 5
    assert attempts(events)["flaky"] == 2
    second = next(
        e for e in events if e.type == "task.scheduled" and getattr(e.payload, "attempt", 1) == 2
    )
    assert second.occurred_at >= retry.due_at  # the retry delay was honoured


def task_id(events: list[Event], ref: str) -> str:
    return next(
        str(getattr(e.payload, "task_id", ""))
        for e in events
        if e.type == "task.scheduled" and getattr(e.payload, "ref", "") == ref
    )
