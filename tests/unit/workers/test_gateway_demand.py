"""The gateway's demand and patience (ADR 24 a, ADR 34), as the pure bookkeeping they are:
every call takes the clock, so no sleeps and no broker."""

from __future__ import annotations

import pytest

from es_sched.workers.gateway.demand import IDLE_GAPS, MIN_PATIENCE_S, Demand

WINDOW = 10.0


def _polled(d: Demand, every: float, times: int, start: float = 0.0) -> float:
    at = start
    for i in range(times):
        at = start + i * every
        d.asked("t", "w", 4, at, next_of_update=False)
    return at


def test_a_type_asked_for_once_waits_the_whole_window() -> None:
    d = Demand(WINDOW)
    d.asked("t", "w", 4, 100.0, next_of_update=False)
    assert d.patience("t") == WINDOW
    assert not d.idle("t", 100.0 + WINDOW - 0.01)
    assert d.idle("t", 100.0 + WINDOW)


@pytest.mark.parametrize(
    ("every", "patience"),
    [(0.1, MIN_PATIENCE_S), (0.5, IDLE_GAPS * 0.5), (1.0, IDLE_GAPS * 1.0), (5.0, WINDOW)],
)
def test_patience_is_a_few_gaps_between_the_floor_and_the_window(
    every: float, patience: float
) -> None:
    d = Demand(WINDOW)
    last = _polled(d, every, 10)
    assert d.patience("t") == pytest.approx(patience)
    assert not d.idle("t", last + patience * 0.9)
    assert d.idle("t", last + patience * 1.01)


def test_patience_follows_gaps_that_grow() -> None:
    d = Demand(WINDOW)
    last = _polled(d, 0.1, 10)
    before = d.patience("t")
    _polled(d, 1.0, 10, start=last + 1.0)
    assert d.patience("t") > 3 * before  # from the 1 s floor to ~4 gaps of ~0.9 s


def test_a_long_poll_waiting_keeps_the_type_asked_for() -> None:
    d = Demand(WINDOW)
    _polled(d, 0.1, 10)
    d.waiting("t", 1.0, on=True)
    assert not d.idle("t", 1000.0)
    assert not d.expire(1000.0) and d.types() == {"t"}
    d.waiting("t", 1000.0, on=False)  # asked for until it stopped waiting
    assert not d.idle("t", 1000.1)
    assert d.idle("t", 1000.0 + d.patience("t"))


def test_expire_forgets_idle_types_and_their_room_only() -> None:
    d = Demand(WINDOW)
    d.asked("t", "w1", 3, 0.0, next_of_update=False)
    d.asked("t", "w2", 2, 0.0, next_of_update=False)
    d.asked("u", "w1", 7, 9.0, next_of_update=False)
    assert (d.types(), d.room()) == ({"t", "u"}, 12)
    assert d.expire(WINDOW)  # "t" idle, "u" asked for 1 s ago
    assert (d.types(), d.room()) == ({"u"}, 7)
    assert not d.expire(WINDOW + 0.5)


def test_update_v2s_next_task_keeps_the_batch_count_a_poll_replaces_it() -> None:
    d = Demand(WINDOW)
    d.asked("t", "sdk", 32, 0.0, next_of_update=False)
    d.asked("t", "sdk", 1, 0.2, next_of_update=True)
    assert d.room() == 32
    d.asked("t", "sdk", 2, 0.4, next_of_update=False)
    assert d.room() == 2


def test_a_type_forgotten_for_a_window_starts_again_from_the_window() -> None:
    d = Demand(WINDOW)
    last = _polled(d, 0.1, 10)
    d.expire(last + 1.5)
    assert d.types() == set() and d.patience("t") == MIN_PATIENCE_S
    d.expire(last + WINDOW)
    assert d.patience("t") == WINDOW
