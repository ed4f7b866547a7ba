"""The retry relay's pure parts: the token bucket and the per-partition heads."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from es_sched.domain.commands import FireTimer
from es_sched.errors import SchemaError
from es_sched.runtime.retry_relay import MAX_HELD, Held, TierHeads, TokenBucket, parse_retry

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_bucket_starts_full_and_refills_at_the_rate_up_to_the_burst() -> None:
    clock = FakeClock()
    bucket = TokenBucket(20, clock)
    assert bucket.take(100) == 20
    assert bucket.take(1) == 0
    clock.now += 0.5
    assert bucket.take(100) == 10
    clock.now += 60
    assert bucket.take(100) == 20  # burst cap


def test_bucket_below_one_per_second_still_allows_one() -> None:
    clock = FakeClock()
    bucket = TokenBucket(0.5, clock)
    assert bucket.capacity == 1 and bucket.take(5) == 1
    clock.now += 1.0
    assert bucket.take(5) == 0
    clock.now += 1.0
    assert bucket.take(5) == 1


@pytest.mark.parametrize("rate", [0.5, 1, 7.5, 20, 200])
def test_bucket_rate_over_a_simulated_ten_seconds(rate: float) -> None:
    clock = FakeClock()
    bucket = TokenBucket(rate, clock)
    released = 0
    for _ in range(1000):  # 10 s in 10 ms ticks, always more demand than tokens
        released += bucket.take(10_000)
        clock.now += 0.01
    assert released <= rate * 10 + max(1.0, rate)
    assert released >= rate * 10 - 1  # and it does not starve


def retry(offset: int, due_s: float, wf: str = "wf-1") -> Held:
    due = T0 + timedelta(seconds=due_s)
    fire = FireTimer(f"retry:t{offset}:2", wf, kind="retry", task_id=f"t{offset}", due_at=due)
    return Held(offset, due, fire=fire)


def poison(offset: int) -> Held:
    return Held(offset, None, error=SchemaError("bad"))


A, B = ("es.retry-5s", 0), ("es.retry-30s", 1)


def offsets(batch: list[tuple[tuple[str, int], Held]]) -> list[tuple[tuple[str, int], int]]:
    return [(tp, h.offset) for tp, h in batch]


def test_nothing_is_released_before_its_head_is_due_and_the_partition_pauses() -> None:
    heads = TierHeads()
    heads.add(A, retry(0, 5))
    heads.add(A, retry(1, 1))  # due earlier, but behind the head
    assert heads.select(T0 + timedelta(seconds=4), tokens=10) == []
    assert heads.should_pause(A, T0 + timedelta(seconds=4))
    assert not heads.should_pause(A, T0 + timedelta(seconds=5))
    assert offsets(heads.select(T0 + timedelta(seconds=5), tokens=10)) == [(A, 0), (A, 1)]


def test_release_order_is_earliest_head_first_and_tokens_cap_the_batch() -> None:
    heads = TierHeads()
    for offset, due in enumerate([1.0, 2.0, 3.0]):
        heads.add(A, retry(offset, due))
    for offset, due in enumerate([1.5, 2.5]):
        heads.add(B, retry(offset, due))
    now = T0 + timedelta(seconds=10)
    assert offsets(heads.select(now, tokens=3)) == [(A, 0), (B, 0), (A, 1)]
    assert offsets(heads.select(now, tokens=10, limit=2)) == [(A, 0), (B, 0)]


def test_poison_takes_no_token_and_does_not_block() -> None:
    heads = TierHeads()
    heads.add(A, poison(0))
    heads.add(A, retry(1, 1))
    heads.add(B, poison(7))
    batch = heads.select(T0 + timedelta(seconds=2), tokens=0)
    assert sorted(offsets(batch)) == sorted([(A, 0), (B, 7)])
    heads.confirm(batch)
    assert offsets(heads.select(T0 + timedelta(seconds=2), tokens=1)) == [(A, 1)]


def test_confirm_forgets_released_records_and_refetched_ones_are_ignored() -> None:
    heads = TierHeads()
    assert heads.add(A, retry(0, 1)) and heads.add(A, retry(1, 1))
    batch = heads.select(T0 + timedelta(seconds=1), tokens=1)
    heads.confirm(batch)
    assert not heads.add(A, retry(1, 1))  # fetched again after a resume: already held
    assert heads.backlog() == {"es.retry-5s": 1}
    heads.confirm(heads.select(T0 + timedelta(seconds=1), tokens=1))
    assert heads.backlog() == {"es.retry-5s": 0}
    assert not heads.should_pause(A, T0)


def test_a_full_partition_pauses_even_when_due_and_drop_forgets_it() -> None:
    heads = TierHeads()
    for offset in range(MAX_HELD):
        heads.add(A, retry(offset, 0))
    assert heads.should_pause(A, T0 + timedelta(seconds=1))
    heads.drop([A])
    assert heads.partitions() == set() and heads.add(A, retry(0, 0))


def test_parse_retry_builds_the_deterministic_fire_input() -> None:
    doc = {
        "workflow_id": "wf-9",
        "task_id": "task-3",
        "attempt": 1,
        "next_attempt": 2,
        "due_at": "2026-12-01T12:00:05Z",
        "delay_seconds": 5.0,
    }
    fire = parse_retry(json.dumps(doc).encode())
    assert fire == FireTimer(
        "retry:task-3:2", "wf-9", kind="retry", task_id="task-3", due_at=T0 + timedelta(seconds=5)
    )
    for bad in [b"garbage", None, b"{}", json.dumps({**doc, "due_at": "2026-12-01T12:00"})]:
        with pytest.raises(SchemaError):
            parse_retry(bad if not isinstance(bad, str) else bad.encode())
