"""Learned cost: a task's estimated resources corrected by what its size class measured (ADR 66).

A cost model (``workers.media.cost``) turns a transcode into cpu-seconds and sizes it: enough
cores (``cores_for``) to finish in about ``TARGET_WALL_S``, and a memory figure. The resources
it declares carry its ``inputs`` (``model``, ``cpu_seconds``, ``cpu_max``, ``accel``, the
source's ``duration_s``...), so the dispatcher can tell an estimate from a figure a person
wrote, and the analytics role can learn, per task type and size class, how far off the model
is: ``RunStats.cost_ratio`` (measured cpu-seconds / the estimate the task declared) and
``RunStats.memory_p95_mb`` (the measured peak resident memory).

``correct`` is the one rule that uses them, applied where the estimate meets the fleet (the
dispatcher, before it places a task): the estimated cpu-seconds times the learned ratio, sized
again by the model's own rule (the same floor, step and cap), and the learned memory P95 with
headroom. A correction moves a figure at most ``RATIO_BOUNDS`` away from the estimate, so one
odd window cannot make a task unplaceable or pack a worker past what it can hold; a size class
with fewer than ``MIN_SAMPLES`` runs, no stats, a GPU-path estimate (its cpu is fixed, the
encoder is on the device) and a task whose resources were not estimated are left as declared.
The result says what it used, so the assignment shows estimate against learned.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from es_sched.domain.learned import RunStats
from es_sched.domain.pickling import frozen_by_constructor

TARGET_WALL_S = 60.0  # a rendition is sized to finish in about this long
CPU_FLOOR = 0.5
CPU_STEP = 0.5
MEMORY_STEP_MB = 64
RATIO_BOUNDS = (0.25, 4.0)  # a learned figure stays within these factors of the estimate
MEMORY_HEADROOM = 1.25  # over the measured P95: a longer source of the class peaks higher
MIN_SAMPLES = 3  # runs of the size class before what it measured replaces the estimate
ESTIMATE_KEY = "inputs"  # where estimated resources carry the model's inputs (``size_class``)
LEARNED_KEY = "learned"  # where corrected resources say what was used


def step_up(value: float, step: float) -> float:
    """``value`` rounded up to a multiple of ``step`` (tolerating float noise)."""
    return math.ceil(value / step - 1e-9) * step


def cores_for(cpu_seconds: float, cpu_max: float) -> float:
    """Cores for ``cpu_seconds`` of work to take about ``TARGET_WALL_S``: a multiple of
    ``CPU_STEP``, at least ``CPU_FLOOR``, at most ``cpu_max`` (what the encoder can use at that
    size and a worker offers)."""
    return max(CPU_FLOOR, min(step_up(cpu_seconds / TARGET_WALL_S, CPU_STEP), cpu_max))


def _bounded(value: float, estimate: float) -> float:
    low, high = RATIO_BOUNDS
    return min(max(value, estimate * low), estimate * high)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


@dataclass(frozen=True)
class Corrected:
    """Resources to place by, and what the correction used (``resources[LEARNED_KEY]``)."""

    resources: dict[str, Any]
    cost_ratio: float | None  # the ratio applied, after bounds; None: cpu as estimated
    memory_mb: int | None  # the learned memory; None: memory as estimated


def correct(resources: Mapping[str, Any], stats: RunStats | None) -> Corrected | None:
    """``resources`` corrected by ``stats`` (the task's type and size class), or None when the
    declared figures stand (see the module docstring for when)."""
    inputs = resources.get(ESTIMATE_KEY)
    if not isinstance(inputs, Mapping) or inputs.get("accel", "cpu") != "cpu":
        return None
    if stats is None or stats.samples < MIN_SAMPLES:
        return None
    cpu_seconds, cpu_max = _number(inputs.get("cpu_seconds")), _number(inputs.get("cpu_max"))
    cpu, memory = _number(resources.get("cpu")), _number(resources.get("memory_mb"))
    ratio = _number(stats.cost_ratio)
    learned_memory = _number(stats.memory_p95_mb)
    out = dict(resources)
    used: dict[str, Any] = {
        "size_class": stats.size_class,
        "samples": stats.samples,
        "window_end": stats.window_end,
        "estimate": {"cpu": cpu, "memory_mb": resources.get("memory_mb")},
    }
    applied_ratio: float | None = None
    if ratio is not None and ratio > 0 and cpu_seconds is not None and cpu_max is not None:
        applied_ratio = round(_bounded(ratio, 1.0), 3)
        out["cpu"] = cores_for(cpu_seconds * applied_ratio, max(cpu_max, CPU_FLOOR))
        used["cost_ratio"] = applied_ratio
        used["cpu_seconds"] = round(cpu_seconds * applied_ratio, 3)
    applied_memory: int | None = None
    if learned_memory is not None and learned_memory > 0 and memory is not None and memory > 0:
        wanted = _bounded(learned_memory * MEMORY_HEADROOM, memory)
        applied_memory = int(step_up(wanted, MEMORY_STEP_MB))
        out["memory_mb"] = applied_memory
        used["memory_p95_mb"] = learned_memory
    if applied_ratio is None and applied_memory is None:
        return None
    out[LEARNED_KEY] = used
    return Corrected(out, applied_ratio, applied_memory)


frozen_by_constructor(globals())  # pickled through constructors (domain.pickling, ADR 51)
