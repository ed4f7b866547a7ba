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
  before that (``samples`` 0: nothing learned for it yet).

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
from es_sched.domain.learned import RunStats, size_class
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
    run_s = percentile_s(stats, policy.percentile) if stats is not None else math.nan
    if stats is None or samples < policy.min_samples or not _usable(run_s):
        # an unusable figure (advice from outside) falls back like too few samples
        return {
            "source": "static",
            "timeout_seconds": s.timeout_seconds,
            "samples": samples,
            "size_class": cls,
        }
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
