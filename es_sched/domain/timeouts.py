"""Dynamic timeouts (ADR 65): a worker task's total timeout from its type's learned run times.

A TaskDef (or a workflow task, or its inline ``taskDefinition``) may ask for one with
``dynamicTimeout`` (``definitions.DynamicTimeout``). When such a task is scheduled, ``chosen``
looks up what the analytics role learned for its type and size class (``learned.size_class``)
through the decision's ``Learned`` input and returns what the attempt will use, as the
``timeout`` field of its ``task.scheduled``:

- ``{"source": "learned", "timeout_seconds": clamp(run_s x factor, floor, ceiling),
  "percentile", "run_s", "factor", "samples", "size_class", "window_end"}`` once the window
  has ``minSamples`` measured runs and a usable figure;
- ``{"source": "static", "timeout_seconds": <timeoutSeconds>, "samples", "size_class"}``
  before that (``samples`` 0: nothing learned for it yet), and with ``"censored": <runs cut>,
  "window_end"`` when too many of the window's runs were cut by their timeout for the
  percentile to be known (``censored``: a type that slowed down past its learned timeout).

A task without a policy records nothing (``{}``): its timeouts are its settings', as before.
Everything after the schedule reads the recorded figure, never the lookup again
(``total_timeout``): the timer armed at the start and the check when it fires, after a
restore, in replay and in the audit, which feeds each recorded figure back as the lookup's
answer (``audit.determinism``). The response (heartbeat) timeout stays the declared one: it
bounds a silence, not a run.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from es_sched.domain.definitions import TaskSettings
from es_sched.domain.learned import CUT_BY_TIMEOUT, RunStats, size_class
from es_sched.domain.state import TaskState

JSON = dict[str, Any]

# What the decider knows of a task type and size class when it decides (the stats topic's
# latest proposal, ``kafka.stats.StatsView.runtime``), or None: nothing learned.
Learned = Callable[[str, str], RunStats | None]


def nothing_learned(task_type: str, size_class: str) -> RunStats | None:
    """The lookup of a decision without learned figures (the simulator, tests)."""
    return None


def percentile_s(stats: RunStats, percentile: int) -> float:
    if percentile == 50:
        return stats.run_p50_s
    return stats.run_p99_s if percentile == 99 else stats.run_p95_s


def censored(stats: RunStats, percentile: int) -> int:
    """The window's runs cut by a total timeout when there are too many of them for its
    ``percentile`` to be known (0 otherwise).

    A run that timed out ran at least its timeout, how much longer is unknown (a censored
    sample), and the percentile of the completed runs alone then understates the type. Up to
    ``100 - percentile`` % of the window's runs may be cut without reaching the percentile's
    rank (a stuck task now and then, which is what the timeout is for); past that share the
    true percentile is at least the timeout that cut them, and an attempt falls back to its
    static timeout until a window's completed runs show the new figure. Without this a type
    that slows down past its learned timeout would be cut short forever, learning nothing."""
    cut = int(stats.failures_by_reason.get(CUT_BY_TIMEOUT, 0))
    runs = stats.samples + cut
    return cut if cut * 100 > (100 - percentile) * runs else 0


def _usable(value: Any) -> bool:
    number = isinstance(value, int | float) and not isinstance(value, bool)
    return number and math.isfinite(value) and value >= 0


def chosen(
    s: TaskSettings,
    task_type: str,
    task_input: Mapping[str, Any],
    resources: Mapping[str, Any],
    learned: Learned,
) -> JSON:
    """The timeout one attempt uses and where it came from (empty: no policy)."""
    policy = s.dynamic_timeout
    if policy is None:
        return {}
    cls = size_class(task_input, resources)
    stats = learned(task_type, cls)
    samples = stats.samples if stats is not None else 0
    static: JSON = {
        "source": "static",
        "timeout_seconds": s.timeout_seconds,
        "samples": samples,
        "size_class": cls,
    }
    if stats is None or samples < policy.min_samples:
        return static
    cut = censored(stats, policy.percentile)
    if cut:
        return {**static, "censored": cut, "window_end": stats.window_end}
    run_s = percentile_s(stats, policy.percentile)
    if not _usable(run_s):
        return static  # an unusable figure (advice from outside) falls back like too few
    value = min(max(run_s * policy.factor, policy.floor_s), policy.ceiling_s)
    return {
        "source": "learned",
        "timeout_seconds": round(value, 3),
        "percentile": policy.percentile,
        "run_s": run_s,
        "factor": policy.factor,
        "samples": samples,
        "size_class": cls,
        "window_end": stats.window_end,
    }


def recorded_seconds(timeout: Mapping[str, Any]) -> float | None:
    """The total timeout a ``task.scheduled`` recorded (None: it recorded none)."""
    value: Any = timeout.get("timeout_seconds")
    return float(value) if _usable(value) else None


def total_timeout(task: TaskState, s: TaskSettings) -> float:
    """The total timeout of one attempt, seconds (0: none): the recorded one, else the
    settings'. The one rule the timer and its check both read."""
    return task.timeout_s if task.timeout_s is not None else s.timeout_seconds
