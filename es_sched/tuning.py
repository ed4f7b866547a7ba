"""Process-wide interpreter tuning for the roles that decide, project and replay."""

from __future__ import annotations

import gc
import sys
from collections.abc import Iterator
from contextlib import contextmanager


def tune_gc(young: int) -> None:
    """Set the young-generation threshold of the cycle collector, process-wide, keeping the
    older generations' (0: leave the interpreter's default). These roles make many
    short-lived, acyclic objects a batch (decoded events, folded states, rows) next to large
    long-lived ones; at the default threshold the collector runs every few inputs and rescans
    what a batch staged, while reference counting frees those objects anyway (ADR 30)."""
    if young:
        gc.set_threshold(young, *gc.get_threshold()[1:])


def tune_switch(interval_us: int) -> None:
    """Set the interpreter's thread switch interval, process-wide (0: leave the default). A
    thread waiting on a socket (the projector's writer, the transaction calls' threads) gets
    the GIL back only when the busy folding thread reaches the interval: a convoy on every
    round trip (ADR 45)."""
    if interval_us:
        sys.setswitchinterval(interval_us / 1_000_000)


@contextmanager
def collector_paused() -> Iterator[None]:
    """No cycle collection inside: for a bulk load that builds only what it keeps. A decider's
    restore decodes a partition's states and holds every one; the decode's temporaries are
    acyclic, freed by reference counting, so a collection during it finds nothing and walks the
    growing heap (and the states the process held before): ``bench/results/current/``
    ``restore_cpu.json`` and ``decider_state.json``. The collector is left as it was found: a
    caller that had it off keeps it off."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
