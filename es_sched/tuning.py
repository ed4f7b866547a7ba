"""Process-wide interpreter tuning for es-sched's allocation-heavy roles.

The decider, the projectors and the replay each make thousands of short-lived, acyclic
objects a batch (decoded events, folded states and rows, records) while holding large,
long-lived ones (a partition's states, the projector's row cache). At CPython's default
young-generation threshold of 700 the cycle collector ran every few inputs and rescanned what
a batch had staged each time: about a quarter of the decider's CPU (ADR 30) and a sixth of a
PostgreSQL projector's (19,000 -> 23,500 events per CPU second at 50,000, issue 15).
Reference counting still frees those objects at once; only cycles wait longer.
"""

from __future__ import annotations

import gc


def tune_gc(young: int) -> None:
    """Set the young-generation threshold of the cycle collector, process-wide, keeping the
    older generations' (0: leave the interpreter's default)."""
    if young:
        gc.set_threshold(young, *gc.get_threshold()[1:])
