"""The timer role and the retry relay against the real broker.

Each test gets its own topic prefix (so its own topics, groups and transactional ids). What the
roles emitted is checked by reading ``commands`` with ``read_committed`` to its end after the
roles stopped, so "exactly once" is an exact count, not a wait for silence.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from uuid import uuid4

import pytest
from confluent_kafka import OFFSET_BEGINNING, KafkaError, Message, TopicPartition

from es_sched.domain.commands import FireTimer
from es_sched.kafka import clients
from es_sched.kafka.dead_letters import header_map
from es_sched.kafka.topics import Topics, ensure_topics, topics_for
from es_sched.runtime.retry_relay import RetryRelay
from es_sched.runtime.timer_service import TimerService
from es_sched.serialization.codec import decode_input
from es_sched.settings import Settings, load_settings
from es_sched.stack import probes

pytestmark = pytest.mark.integration


@pytest.fixture
def make_settings(monkeypatch: pytest.MonkeyPatch) -> Callable[..., tuple[Settings, Topics]]:
    def make(**env: str) -> tuple[Settings, Topics]:
        monkeypatch.setenv("ES_SCHED_KAFKA_TOPIC_PREFIX", f"t{uuid4().hex[:10]}")
        monkeypatch.setenv("ES_SCHED_KAFKA_PARTITIONS", "2")
        monkeypatch.setenv("ES_SCHED_DISPATCH_ASSIGNMENT_PARTITIONS", "2")
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        settings = load_settings()
        probe = probes.kafka(settings.kafka.bootstrap_servers)
        if not probe.healthy:
            pytest.fail(f"Kafka not healthy ({probe.detail}): run `es-sched stack up`")
        topics = topics_for(settings)
        ensure_topics(settings.kafka.bootstrap_servers, topics)
        return settings, topics

    return make


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


class Tail:
    """A read_committed reader of every partition of a topic, from the beginning."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        self._c = clients.consumer(bootstrap, None)
        self._c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        self.records: list[Message] = []

    def until(self, done: Callable[[list[Message]], bool], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not done(self.records):
            assert time.monotonic() < deadline, f"timed out with {len(self.records)} records"
            msg = self._c.poll(0.2)
            if msg is not None and msg.error() is None:
                self.records.append(msg)

    def close(self) -> None:
        self._c.close()


def read_all(bootstrap: str, topic: str, partitions: int) -> list[Message]:
    """Every committed record of a topic, up to its end now (writers must have stopped)."""
    c = clients.consumer(bootstrap, None, **{"enable.partition.eof": True})
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    out: list[Message] = []
    at_end: set[int | None] = set()
    deadline = time.monotonic() + 30
    try:
        while len(at_end) < partitions:
            assert time.monotonic() < deadline, f"reading {topic} did not reach its end"
            msg = c.poll(0.5)
            if msg is None:
                continue
            err = msg.error()
            if err is None:
                out.append(msg)
            elif err.code() == KafkaError._PARTITION_EOF:
                at_end.add(msg.partition())
            else:
                raise AssertionError(str(err))
    finally:
        c.close()
    return out


def fires(records: list[Message]) -> list[FireTimer]:
    out = []
    for msg in records:
        inp = decode_input(msg.value() or b"")
        assert isinstance(inp, FireTimer)
        out.append(inp)
    return out


def ms(at: datetime) -> int:
    return int(at.timestamp() * 1000)


def test_timers_fire_once_at_their_time_and_survive_a_restart(
    make_settings: Callable[..., tuple[Settings, Topics]],
) -> None:
    settings, topics = make_settings()
    bootstrap, n = settings.kafka.bootstrap_servers, settings.kafka.partitions
    t0 = datetime.now(UTC)
    p = clients.producer(bootstrap)

    def write(name: str, kind: str, task_id: str | None, due_s: float) -> tuple[str, datetime]:
        due = t0 + timedelta(seconds=due_s)
        doc = {
            "timer_id": f"timer-{name}", "workflow_id": f"wf-{name}", "kind": kind,
            "task_id": task_id, "due_at": due.isoformat(),
        }  # fmt: skip
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

    tail = Tail(bootstrap, topics.commands, n)
    try:
        with running(TimerService(settings)):
            tail.until(lambda r: len(r) >= 1, timeout_s=30)
        with running(TimerService(settings)):  # a restart: state comes back from the topic
            tail.until(lambda r: {f.workflow_id for f in fires(r)} >= set(expected), 30)
    finally:
        tail.close()

    records = read_all(bootstrap, topics.commands, n)
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
    for msg in read_all(bootstrap, topics.timers, n):
        live[msg.key() or b""] = msg.value()
    assert {k for k, v in live.items() if v is not None} == {b"timer-hour"}
    (letter,) = read_all(bootstrap, topics.dead_letters, n)  # once, although restored twice
    headers = header_map(letter)
    assert (letter.key(), letter.value()) == (b"timer-bad", b"{not json")
    assert (headers["origin.topic"], headers["error.role"]) == (topics.timers, "timer-service")


def test_retry_relay_releases_due_retries_once_at_the_capped_rate(
    make_settings: Callable[..., tuple[Settings, Topics]],
) -> None:
    settings, topics = make_settings(ES_SCHED_RUN_RETRY_RELEASE_PER_S="20")
    bootstrap, n = settings.kafka.bootstrap_servers, settings.kafka.partitions
    tier = topics.retry(5)
    commands = Tail(bootstrap, topics.commands, n)
    dead = Tail(bootstrap, topics.dead_letters, n)
    garbage: list[Message] = []
    try:
        with running(RetryRelay(settings)):
            due = datetime.now(UTC) + timedelta(seconds=1)
            p = clients.producer(bootstrap)
            p.produce(
                tier, key="wf-0", value=b"\x00garbage", on_delivery=lambda e, m: garbage.append(m)
            )
            for i in range(50):
                doc = {
                    "workflow_id": f"wf-{i}", "task_id": f"task-{i}", "attempt": 1,
                    "next_attempt": 2, "due_at": due.isoformat(), "delay_seconds": 1.0,
                }  # fmt: skip
                p.produce(tier, key=f"wf-{i}", value=json.dumps(doc).encode())
            assert p.flush(30) == 0
            commands.until(lambda r: len(r) >= 50, timeout_s=60)
            dead.until(lambda r: len(r) >= 1, timeout_s=30)
    finally:
        commands.close()
        dead.close()

    records = read_all(bootstrap, topics.commands, n)
    fired = fires(records)
    assert sorted(f.input_id for f in fired) == sorted(f"retry:task-{i}:2" for i in range(50))
    assert all(f.kind == "retry" and f.due_at == due for f in fired)
    stamps = sorted(m.timestamp()[1] for m in records)
    assert stamps[0] >= ms(due), "released before due"
    # 20 tokens at the due time, then 20/s: the 50th needs 1.5 s more (10 ms for ms rounding).
    span_s = (stamps[-1] - ms(due)) / 1000
    assert span_s >= 1.49, f"rate not capped: 50 released within {span_s:.3f} s"
    print(f"\nretry relay: 50 released {span_s:.3f} s after due; after the burst of 20, "
          f"{30 / ((stamps[-1] - stamps[19]) / 1000):.1f}/s")  # fmt: skip

    (letter,) = read_all(bootstrap, topics.dead_letters, n)
    headers = header_map(letter)
    (original,) = garbage
    assert letter.value() == b"\x00garbage" and letter.key() == b"wf-0"
    assert headers["origin.topic"] == tier
    assert headers["origin.partition"] == str(original.partition())
    assert headers["origin.offset"] == str(original.offset())
    assert headers["error.role"] == "retry-relay" and headers["error.class"] == "SchemaError"
