"""The processes that decide, project or replay raise the cycle collector's young threshold
(ADR 30, ``es_sched.tuning``), the decider and projectors lower the thread switch interval,
and each knob at 0 leaves the interpreter alone."""

from __future__ import annotations

import gc
import sys
from collections.abc import Iterator

import pytest

from es_sched.projections import replay
from es_sched.projections.projector import Projector
from es_sched.settings import Settings
from es_sched.tuning import collector_paused, tune_gc, tune_switch
from testkit.settings import private_settings


@pytest.fixture
def restore_gc() -> Iterator[None]:
    before, interval = gc.get_threshold(), sys.getswitchinterval()
    yield
    gc.set_threshold(*before)
    sys.setswitchinterval(interval)


@pytest.mark.usefixtures("restore_gc")
def test_young_threshold_is_raised_and_older_ones_kept() -> None:
    gc.set_threshold(700, 11, 12)
    tune_gc(50_000)
    assert gc.get_threshold() == (50_000, 11, 12)


@pytest.mark.usefixtures("restore_gc")
def test_zero_keeps_the_interpreters_default() -> None:
    gc.set_threshold(700, 10, 10)
    tune_gc(0)
    assert gc.get_threshold() == (700, 10, 10)


def _young(threshold: int) -> Settings:
    return private_settings(ES_SCHED_RUN_GC_YOUNG_THRESHOLD=str(threshold))


class _Store:
    name = "pg"


@pytest.mark.usefixtures("restore_gc")
def test_a_projector_tunes_its_process() -> None:
    gc.set_threshold(700, 10, 10)
    Projector(_young(12_345), _Store())  # type: ignore[arg-type]
    assert gc.get_threshold() == (12_345, 10, 10)


@pytest.mark.usefixtures("restore_gc")
def test_a_replay_tunes_its_process_before_it_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    class Reached(Exception):
        pass

    def partitions(settings: object) -> list[int]:
        raise Reached

    monkeypatch.setattr(replay, "partitions", partitions)
    gc.set_threshold(700, 10, 10)
    with pytest.raises(Reached):
        replay.replay(_young(23_456))
    assert gc.get_threshold() == (23_456, 10, 10)


@pytest.mark.usefixtures("restore_gc")
def test_the_switch_interval_is_set_in_microseconds_and_zero_keeps_it() -> None:
    sys.setswitchinterval(0.005)
    tune_switch(0)
    assert sys.getswitchinterval() == pytest.approx(0.005)
    tune_switch(500)
    assert sys.getswitchinterval() == pytest.approx(0.0005)


@pytest.mark.usefixtures("restore_gc")
def test_a_projector_lowers_its_process_switch_interval() -> None:
    sys.setswitchinterval(0.005)
    settings = private_settings(ES_SCHED_RUN_SWITCH_INTERVAL_US="250")
    Projector(settings, _Store())  # type: ignore[arg-type]
    assert sys.getswitchinterval() == pytest.approx(0.00025)


def test_a_paused_collector_collects_nothing_inside_and_is_back_on_after() -> None:
    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
        held = [[i] for i in range(10 * max(gc.get_threshold()[0], 1))]
        # an enabled collector runs as the count passes the threshold, which resets it
        assert gc.get_count()[0] > gc.get_threshold()[0], len(held)
    assert gc.isenabled()


def test_a_paused_collector_is_back_on_after_an_error_and_off_if_it_was_off() -> None:
    with pytest.raises(RuntimeError), collector_paused():
        raise RuntimeError("restore failed")
    assert gc.isenabled()
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()  # the caller's choice stands
    finally:
        gc.enable()
