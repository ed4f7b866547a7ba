"""Adaptive transactions (ADR 30): a backlog grows the batch up to its ceiling within the
latency budget; a trickle, or a batch over the budget, shrinks it back to the base."""

from __future__ import annotations

import threading
from typing import Any

from es_sched.kafka.transactional import TransactionalLoop
from es_sched.kafka.txn_role import Batch, BatchSizer


def test_full_polls_double_the_batch_up_to_the_ceiling() -> None:
    sizer = BatchSizer(500, 2000, budget_s=0.25)
    seen = []
    for _ in range(4):
        sizer.observe(sizer.size, 0.05)
        seen.append(sizer.size)
    assert seen == [1000, 2000, 2000, 2000]


def test_a_trickle_shrinks_it_back_to_the_base() -> None:
    sizer = BatchSizer(500, 2000, budget_s=0.25)
    sizer.size = 2000
    sizer.observe(300, 0.01)
    assert sizer.size == 1000
    sizer.observe(10, 0.01)
    sizer.observe(10, 0.01)
    assert sizer.size == 500


def test_a_batch_over_the_budget_shrinks_it_and_one_near_it_does_not_grow() -> None:
    sizer = BatchSizer(500, 4000, budget_s=0.2)
    sizer.size = 2000
    sizer.observe(2000, 0.3)  # full, but slower than the budget
    assert sizer.size == 1000
    sizer.observe(1000, 0.15)  # full, within the budget but over half of it
    assert sizer.size == 1000


def test_without_a_ceiling_the_size_is_fixed() -> None:
    sizer = BatchSizer(100)
    sizer.observe(100, 0.0)
    assert sizer.size == 100


class _Consumer:
    """Always a full poll; records how many records each poll asked for."""

    def __init__(self) -> None:
        self.asked: list[int] = []

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Any]:
        self.asked.append(num_messages)
        return [_Msg()] * num_messages


class _Msg:
    def error(self) -> None:
        return None


class _Role:
    def __init__(self, stop: threading.Event, polls: int) -> None:
        self.stop, self.polls = stop, polls

    def step(self, records: list[Any]) -> Batch | None:
        self.polls -= 1
        if self.polls == 0:
            self.stop.set()
        return None

    def rewind(self, producer_lost: bool) -> None:
        raise AssertionError("nothing fails here")

    def tick(self) -> None:
        return None


class _Producer:
    def init_transactions(self, timeout: float = -1) -> None:
        return None

    def purge(self, *args: Any, **kwargs: Any) -> None:
        return None

    def close(self) -> bool:
        return True


class _Clients:
    def producer(self, transactional_id: str | None = None, **extra: Any) -> Any:
        return _Producer()


def test_the_loop_polls_for_what_the_sizer_says() -> None:
    stop, consumer = threading.Event(), _Consumer()
    loop = TransactionalLoop(_Clients(), "p-decider-0", "decider", 30_000)
    loop.run(stop, consumer, _Role(stop, 4), 100, 0.0, BatchSizer(100, 300, budget_s=60))  # type: ignore[arg-type]
    assert consumer.asked == [100, 200, 300, 300]
