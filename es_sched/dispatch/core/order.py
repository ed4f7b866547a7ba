"""Downstream-first across task types (ADR 69): which type's next task goes first in a pass.

Seed 001: "when an upstream and a downstream step need the same kind of worker, the downstream
one goes first, otherwise, with new tasks entering all the time, every task gets stuck
upstream". Each task type's queue offers its next task (its head: priority, aging, older
workflow first, tenant share); among those heads ``first`` picks as a type queue picks among
its levels and then within one:

1. the level: the head with the most urgent *effective* level (a handed-back task first, then
   priority lowered by aging) names the level that goes now. Aging lifts a task past other
   levels only, as inside a type's queue: within a level it never reorders, so a task that
   merely waited longer does not overtake a running workflow's next step;
2. within that level, a handed-back task first, then the task with the fewest steps left in its
   workflow (``ReadyTask.steps_to_end``, counted by the decider from the definition:
   ``domain.definitions.steps_to_end``), so a workflow already running finishes before new
   ones take its workers;
3. then the tenant with the smallest fair-share tag (ADR 68), then the older workflow.

A type whose head cannot start now (no worker fits, a limit) is passed over for the rest of
the pass, so the rule never idles a worker another type could use. Off
(``ES_SCHED_DISPATCH_DOWNSTREAM_FIRST`` false), the types take one task each per round in the
order they were first seen, whatever their depth or level.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from es_sched.dispatch.core.queues import ReadyTask


@dataclass(frozen=True)
class Head:
    """One task type's next task, as its queue ranks it."""

    task_type: str
    effective: float  # its aged level; -1: handed back
    level: int  # the level it waits at
    task: ReadyTask
    tenant_tag: float  # its tenant's fair-share tag in the type's pool (0 when off)


def first(heads: Sequence[Head]) -> Head:
    """The head that goes first (``heads`` not empty)."""
    level = min(heads, key=lambda h: (h.effective, h.level)).level
    return min((h for h in heads if h.level == level), key=_within_level)


def _within_level(h: Head) -> tuple[int, int, float, float]:
    return (
        0 if h.effective < 0 else 1,
        h.task.steps_to_end,
        h.tenant_tag,
        h.task.workflow_started_at.timestamp(),
    )
