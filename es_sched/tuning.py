"""Process-wide interpreter tuning for es-sched's allocation-heavy roles.

The decider, the projectors and the replay each make thousands of short-lived, acyclic
objects a batch (decoded events, folded states and rows, records) while holding large,
long-lived ones (a partition's states, the projector's row cache). At CPython's default
young-generation threshold of 700 the cycle collector ran every few inputs and rescanned what
a batch had staged each time: about a quarter of the decider's CPU (ADR 30) and a sixth of a
PostgreSQL projector's (19,000 -> 23,500 events per CPU second at 50,000, issue 15).
Reference counting still frees those objects at once; only cycles wait longer.

The same processes run a thread that mostly waits on a socket (the projector's writer, the
transaction calls' daemon threads) next to one that decodes and folds. Each time the waiting
thread's I/O returns it needs the GIL back, and CPython hands it over only when the busy
thread reaches the switch interval (5 ms by default): a convoy. Per-statement timings of a
PostgreSQL projector over 105,000 events gave the two smallest statements of each batch
0.8 s, 0.13 s at 0.5 ms; py-spy put 48 % of the folding thread's time in waiting for the
writer. Interleaved, 6 pairs on 105,000 events: 14,911 -> 17,401 and 14,223 -> 15,202 events/s
(medians of 3 each, bench/projections.py --before). ``tune_switch`` lowers the interval.
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Iterator
from contextlib import contextmanager


def tune_gc(young: int) -> None:
    """Set the young-generation threshold of the cycle collector, process-wide, keeping the
    older generations' (0: leave the interpreter's default)."""
    if young:
        gc.set_threshold(young, *gc.get_threshold()[1:])


def tune_switch(interval_us: int) -> None:
    """Set the interpreter's thread switch interval, process-wide (0: leave the default)."""
    if interval_us:
        sys.setswitchinterval(interval_us / 1_000_000)


@contextmanager
def collector_paused() -> Iterator[None]:
    """No cycle collection inside: for a bulk load that builds only what it keeps. A decider's
    restore decodes a partition's states and holds every one; the decode's temporaries are
    acyclic, freed by reference counting, so a collection during it finds nothing and walks the
    growing heap (and the states the process held before). Media states restored next to as
    many held: 98.0 -> 75.5 us of CPU a state, medians of 5 rounds in alternating order, the
    slow rounds (140 us) gone (bench/restore_cpu.py); on the broker, 105,000 one-task states
    5.23 -> 4.00 s (bench/decider_state.py). The collector is left as it was found: a caller
    that had it off keeps it off."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
