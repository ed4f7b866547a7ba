"""The decider raises the cycle collector's young threshold (ADR 30) and leaves it alone at 0."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from es_sched.runtime.decider import tune_gc


@pytest.fixture
def restore_gc() -> Iterator[None]:
    before = gc.get_threshold()
    yield
    gc.set_threshold(*before)


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
