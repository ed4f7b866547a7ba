"""The timer role's pure part: latest record per key, tombstones, due order, parsing."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from es_sched.domain.timers import Timer
from es_sched.errors import SchemaError
from es_sched.runtime.timer_service import Entry, TimerHeap, fire_input, parse_timer

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def entry(key: str, due_s: float, offset: int, partition: int = 0) -> Entry:
    timer = Timer(key, "wf-1", "wait", f"task-{key}", T0 + timedelta(seconds=due_s))
    return Entry(timer, partition, offset, b"{}")


def keys(entries: list[Entry]) -> list[str]:
    return [e.timer.timer_id for e in entries]


def test_due_returns_live_timers_earliest_first_and_keeps_them_until_fired() -> None:
    heap = TimerHeap()
    for i, (key, due) in enumerate([("c", 3), ("a", 1), ("b", 2), ("z", 3600)]):
        heap.put(entry(key, due, i))
    assert keys(heap.due(T0)) == []
    assert keys(heap.due(T0 + timedelta(seconds=2))) == ["a", "b"]
    assert keys(heap.due(T0 + timedelta(seconds=2))) == ["a", "b"]  # not consumed by due()
    for e in heap.due(T0 + timedelta(seconds=3)):
        heap.fired(e)
    assert keys(heap.due(T0 + timedelta(hours=2))) == ["z"]
    assert len(heap) == 1


def test_a_replaced_timer_fires_only_at_its_new_time() -> None:
    heap = TimerHeap()
    heap.put(entry("r", 1, 0))
    heap.put(entry("r", 4, 1))
    assert heap.due(T0 + timedelta(seconds=3)) == []
    (fired,) = heap.due(T0 + timedelta(seconds=4))
    assert fired.offset == 1
    heap.put(entry("r", 0.5, 2))  # pulled forward
    assert [e.offset for e in heap.due(T0 + timedelta(seconds=1))] == [2]


def test_tombstone_removes_and_a_later_record_brings_it_back() -> None:
    heap = TimerHeap()
    heap.put(entry("d", 1, 0))
    heap.tombstone("d")
    assert heap.due(T0 + timedelta(days=1)) == [] and len(heap) == 0
    heap.tombstone("never-seen")
    heap.put(entry("d", 2, 5))
    assert keys(heap.due(T0 + timedelta(seconds=2))) == ["d"]


def test_fired_keeps_a_record_that_replaced_the_fired_one() -> None:
    heap = TimerHeap()
    first = entry("r", 1, 0)
    heap.put(first)
    (due,) = heap.due(T0 + timedelta(seconds=1))
    heap.put(entry("r", 9, 1))  # the decider pushed it back while we were firing
    heap.fired(due)
    assert len(heap) == 1 and heap.due(T0 + timedelta(seconds=5)) == []


def test_our_tombstone_over_a_newer_record_queues_that_record_for_rewriting() -> None:
    heap = TimerHeap()
    first, newer = entry("r", 1, 0), entry("r", 9, 1)
    heap.put(first)
    heap.put(newer)
    heap.tombstone("r", of_offset=0)  # meant for offset 0, but Kafka now holds it over offset 1
    assert heap.get("r") is newer and heap.rewrites == {"r": newer}
    heap.put(entry("r", 9, 2))  # the rewrite read back
    assert heap.rewrites == {}
    heap.tombstone("r", of_offset=2)
    assert heap.get("r") is None


def test_our_tombstone_of_the_live_record_deletes_it() -> None:
    heap = TimerHeap()
    heap.put(entry("a", 1, 3))
    heap.tombstone("a", of_offset=3)
    assert len(heap) == 0 and heap.rewrites == {}


def test_drop_partitions_forgets_only_their_timers() -> None:
    heap = TimerHeap()
    heap.put(entry("p0", 1, 0, partition=0))
    heap.put(entry("p1", 1, 0, partition=1))
    assert heap.drop_partitions({1}) == 1
    assert keys(heap.due(T0 + timedelta(seconds=1))) == ["p0"]


def test_many_replacements_keep_the_heap_small() -> None:
    heap = TimerHeap()
    for offset in range(10_000):
        heap.put(entry("busy", offset, offset))
    assert len(heap._heap) < 200
    assert [e.offset for e in heap.due(T0 + timedelta(days=1))] == [9999]


def _record(**overrides: object) -> bytes:
    doc: dict[str, object] = {
        "timer_id": "t-1",
        "workflow_id": "wf-1",
        "kind": "response_timeout",
        "task_id": "task-1",
        "due_at": "2026-12-01T12:00:05+00:00",
    }
    doc.update(overrides)
    return json.dumps(doc).encode()


def test_parse_timer_and_its_deterministic_fire_input() -> None:
    timer = parse_timer("t-1", _record(due_at="2026-12-01T13:00:05+01:00"))
    fire = fire_input(timer)
    assert fire.input_id == "timer:t-1:2026-12-01T12:00:05+00:00"
    assert (fire.workflow_id, fire.kind, fire.task_id) == ("wf-1", "response_timeout", "task-1")
    assert fire.due_at == T0 + timedelta(seconds=5)
    assert parse_timer("t-1", _record(task_id=None, kind="workflow_timeout")).task_id is None


@pytest.mark.parametrize(
    "value",
    [
        b"not json",
        b"\xff\xfe",
        b"[1]",
        _record(due_at="2026-12-01T12:00:05"),  # no timezone
        _record(due_at="tomorrow"),
        _record(kind="nap"),  # not a timer.fired kind
        _record(timer_id="t-2"),  # differs from the key
        _record(workflow_id=None),
    ],
)
def test_parse_timer_rejects_poison(value: bytes) -> None:
    with pytest.raises(SchemaError):
        parse_timer("t-1", value)


def test_parse_timer_refuses_a_timer_whose_fired_input_the_decider_would_refuse() -> None:
    """A 190-character timer id fits the timer record's schema (200), not the fired input's id
    (``timer:<id>:<due>``, 200 at most): the check is the decider's schema, not the timer's."""
    key = "t" * 190
    with pytest.raises(SchemaError, match="input_id"):
        parse_timer(key, _record(timer_id=key))
