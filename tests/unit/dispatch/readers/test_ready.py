"""The ready reader without a broker: it waits for the first record only (ADR 31), hands each
task with where it was read, and passes a poison record to the dead-letter topic."""

from __future__ import annotations

from es_sched.dispatch.readers.ready import ReadyReader
from tests.unit.dispatch.fakes import PART, T0, FakeConsumer, FakeOutput, msg, ready_raw

TOPIC = "p.ready"


def reader() -> tuple[ReadyReader, FakeConsumer, FakeOutput]:
    out = FakeOutput()
    consumer = FakeConsumer(out)
    return ReadyReader(consumer, TOPIC, out, lambda: T0), consumer, out  # type: ignore[arg-type]


def test_a_ready_record_ends_the_wait_and_the_rest_is_taken_without_waiting() -> None:
    """``consume(500, wait)`` waited the whole tick unless 500 records came; ``poll`` returns
    on the first one and what else arrived is drained with a zero timeout."""
    ready, consumer, _ = reader()
    consumer.records = [msg(TOPIC, ready_raw(t), offset=n) for n, t in enumerate("abc")]
    arrivals = list(ready.poll(0.02))
    assert consumer.calls == [("poll", 0.02), ("consume", 499, 0)]
    assert [(a.task.task_id, a.tp, a.offset) for a in arrivals] == [
        ("a", (TOPIC, PART), 0),
        ("b", (TOPIC, PART), 1),
        ("c", (TOPIC, PART), 2),
    ]
    assert arrivals[0].at == T0.timestamp() and arrivals[0].task.partition == PART
    consumer.calls.clear()
    assert list(ready.poll(0.02)) == []  # nothing came: no second call
    assert consumer.calls == [("poll", 0.02)]


def test_a_poison_record_is_dead_lettered_and_does_not_hold_the_commit_point_back() -> None:
    ready, consumer, out = reader()
    consumer.records = [msg(TOPIC, b"{not json", offset=4)]
    assert list(ready.poll(0)) == []
    assert len(out.dead_letters) == 1
    ready.commit()
    assert [(tp.partition, tp.offset) for tp in consumer.commits[0]] == [(PART, 5)]


def test_the_commit_point_waits_for_a_queued_task() -> None:
    ready, consumer, _ = reader()
    consumer.records = [msg(TOPIC, ready_raw(t), offset=n) for n, t in enumerate("ab")]
    first, _second = ready.poll(0)
    ready.offsets.queued(first.tp, first.task.task_id, first.offset)
    ready.commit()
    assert [(tp.partition, tp.offset) for tp in consumer.commits[-1]] == [(PART, 0)]
    ready.offsets.done("a")
    ready.commit()
    assert [(tp.partition, tp.offset) for tp in consumer.commits[-1]] == [(PART, 2)]
