"""Downstream-first across task types (ADR 69): which type's next task goes first in a pass.

Seed 001: "when an upstream and a downstream step need the same kind of worker, the downstream
one goes first, otherwise, with new tasks entering all the time, every task gets stuck
upstream". Each task type's queue offers its next task (priority, aging, older workflow first,
tenant share); among those heads the dispatcher tries, in turn:

1. the most urgent effective level (a handed-back task first, then priority lowered by aging);
2. the task with the fewest steps left in its workflow (``ReadyTask.steps_to_end``, which the
   decider counts from the definition: ``domain.definitions.steps_to_end``), so a workflow
   already running finishes before new ones take its workers;
3. the tenant with the smallest fair-share tag (ADR 68);
4. the older workflow, then the type's first arrival.

A type whose head cannot start now (no worker fits, a limit) is passed over for the rest of
the pass, so the rule never idles a worker another type could use. Off
(``ES_SCHED_DISPATCH_DOWNSTREAM_FIRST`` false), the types take one task each per round in the
order they were first seen, whatever their depth.
"""

from __future__ import annotations

from es_sched.dispatch.core.queues import ReadyTask

HeadKey = tuple[float, int, float, float]


def downstream_first(effective_level: float, task: ReadyTask, tenant_tag: float) -> HeadKey:
    """The rank of one type's head among the heads of all types (lower goes first)."""
    return (
        effective_level,
        task.steps_to_end,
        tenant_tag,
        task.workflow_started_at.timestamp(),
    )
