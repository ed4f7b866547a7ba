"""Ready queues: 9 priority levels per task type, aging, and "finish what is started".

Order inside a level is by the workflow's start time, then arrival: tasks of workflows that
started earlier go first, so a downstream task of a running workflow beats the first task of a
newer one, and tasks of one workflow stay FIFO. Between tenants a level is shared by weight
(``fairshare``, ADR 68): each tenant keeps that order among its own tasks, and the ``TenantOrder``
the dispatcher passes says which tenant goes next. Across levels the head with the lowest
*effective* level wins, where waiting lowers a task's level by one per ``aging_s`` seconds, so
nothing starves. A task handed back (lease expired, preempted) goes to the head of its level.

Which level a task sits at is the SLA component's (``urgency``, ADR 67): its priority, or for a
workflow with a tier the tier's band, lowered as its deadline's slack shrinks. ``escalate``
moves a task to the lower level its slack now asks for; levels only ever drop, as slack does.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from es_sched.dispatch.core.fairshare import Level, TenantOrder
from es_sched.dispatch.core.limits import NO_LIMITS, TaskLimits
from es_sched.dispatch.core.urgency import Urgency

LEVELS = 9  # 0 highest ... 8 lowest
ESCALATE_EVERY_S = 0.1


@dataclass
class ReadyTask:
    task_id: str
    workflow_id: str
    task_type: str
    priority: int
    enqueued_at: datetime
    workflow_started_at: datetime
    attempt: int = 1
    tenant: str | None = None
    rate_limit_key: str | None = None
    resources: dict[str, Any] = field(default_factory=dict)
    limits: TaskLimits = NO_LIMITS  # its TaskDef's rate and concurrency
    partition: int | None = None  # the ready partition it came from (limits.Limits.admit)
    payload: dict[str, Any] = field(default_factory=dict)  # the ready record, passed through
    steps_to_end: int = 0  # steps left in its workflow after it (``order``, ADR 69)
    sla_tier: str | None = None  # the workflow's SLA (ADR 67, urgency)
    deadline: datetime | None = None
    after: tuple[str, ...] = ()  # worker task names left after it on its longest chain
    remaining_s: float = 0.0  # expected remaining critical path, set when queued

    @property
    def urgent(self) -> bool:
        """Its level may drop while it waits: a deadline under a tier."""
        return self.deadline is not None and self.sla_tier is not None


class TypeQueue:
    """The 9 levels of one task type."""

    def __init__(self, aging_s: float, urgency: Urgency | None = None) -> None:
        self.aging_s = aging_s
        self.urgency = urgency or Urgency()
        self.levels: list[Level] = [Level() for _ in range(LEVELS)]
        self._seq = itertools.count()
        self.size = 0
        # Queued tasks that may escalate: task id -> (the level it sits at, the task).
        self.urgent: dict[str, tuple[int, ReadyTask]] = {}

    def _level(self, task: ReadyTask, now: datetime) -> int:
        return self.urgency.level(
            task.priority, task.sla_tier, task.deadline, task.remaining_s, now
        )

    def push(self, task: ReadyTask, front: bool = False, now: datetime | None = None) -> None:
        level = self._level(task, now or task.enqueued_at)
        key = (0 if front else 1, task.workflow_started_at.timestamp(), next(self._seq), task)
        self.levels[level].push(key)
        self.size += 1
        if task.urgent:
            self.urgent[task.task_id] = (level, task)

    def escalate(self, now: datetime) -> int:
        """Move every urgent task whose slack now asks for a lower level; how many moved. The
        level is worked out for each; the heap is searched only for a task that moves (a few
        times in its life: levels only drop, within a band of at most three)."""
        moved = 0
        for task_id, (level, task) in list(self.urgent.items()):
            lower = self._level(task, now)
            if lower >= level:
                continue
            entry = self.levels[level].remove(task)
            if entry is None:  # cannot happen: only take/pop take a task out, and forget it
                del self.urgent[task_id]
                continue
            self.levels[lower].push(entry)
            self.urgent[task_id] = (lower, task)
            moved += 1
        return moved

    def _effective(self, level: int, head: ReadyTask, now: datetime) -> float:
        waited = (now - head.enqueued_at).total_seconds()
        return level - (waited / self.aging_s if self.aging_s > 0 else 0.0)

    def _best(
        self, now: datetime, order: TenantOrder | None
    ) -> tuple[float, float, int, int, ReadyTask] | None:
        """(effective level, workflow start, seq, level, task) of the task that goes next."""
        best: tuple[float, float, int, int, ReadyTask] | None = None
        for level in range(LEVELS):
            entry = self.levels[level].head(order)
            if entry is None:
                continue
            rank, started, seq, task = entry
            handed_back = rank == 0  # requeued at the head: before anything else
            effective = -1.0 if handed_back else max(0.0, self._effective(level, task, now))
            key = (effective, started, seq, level, task)
            if best is None or key[:4] < best[:4]:
                best = key
        return best

    def best_level(self, now: datetime, order: TenantOrder | None = None) -> int | None:
        best = self._best(now, order)
        return None if best is None else best[3]

    def head(
        self, now: datetime, order: TenantOrder | None = None
    ) -> tuple[float, int, ReadyTask] | None:
        """The task that goes next, its effective level (-1: handed back) and its level, to
        rank the heads of several types against each other (``order.first``)."""
        best = self._best(now, order)
        return None if best is None else (best[0], best[3], best[4])

    def peek(self, now: datetime, order: TenantOrder | None = None) -> ReadyTask | None:
        best = self._best(now, order)
        return None if best is None else best[4]

    def next(self, now: datetime, order: TenantOrder | None = None) -> tuple[int, ReadyTask] | None:
        """The task that goes next and its level, for ``take``."""
        best = self._best(now, order)
        return None if best is None else (best[3], best[4])

    def take(self, level: int, task: ReadyTask) -> None:
        """Remove ``task``, which ``next`` returned with ``level``, though the tenant order
        may have changed since (admitting the task counted it against its tenant's quota)."""
        entry = self.levels[level].pop_tenant(task.tenant)
        assert entry[3] is task  # nothing else changed the queue since
        self.size -= 1
        self.urgent.pop(task.task_id, None)

    def pop(self, now: datetime, order: TenantOrder | None = None) -> ReadyTask | None:
        level = self.best_level(now, order)
        if level is None:
            return None
        entry = self.levels[level].pop(order)
        assert entry is not None
        self.size -= 1
        self.urgent.pop(entry[3].task_id, None)
        return entry[3]

    def tenants_mixed(self) -> bool:
        """Whether some level holds tasks of more than one tenant (their order then depends
        on the fair-share tags)."""
        return any(len(level.heaps) > 1 for level in self.levels)

    def depth_by_level(self) -> list[int]:
        return [len(level) for level in self.levels]


class ReadyQueues:
    def __init__(self, aging_s: float = 60.0, urgency: Urgency | None = None) -> None:
        self.aging_s = aging_s
        self.urgency = urgency or Urgency()
        self.by_type: dict[str, TypeQueue] = {}
        self._escalated: datetime | None = None

    def push(self, task: ReadyTask, front: bool = False, now: datetime | None = None) -> None:
        queue = self.by_type.get(task.task_type)
        if queue is None:
            queue = self.by_type[task.task_type] = TypeQueue(self.aging_s, self.urgency)
        if task.urgent and not task.remaining_s:
            task.remaining_s = self.urgency.remaining_s(
                task.task_type, task.payload.get("input") or {}, task.resources, task.after
            )
        queue.push(task, front, now)

    def escalate(self, now: datetime) -> int:
        """``TypeQueue.escalate`` for every type with tasks that may escalate, at most every
        ``ESCALATE_EVERY_S`` (a level changes in steps of seconds; a tick is milliseconds)."""
        if self._escalated is not None and (now - self._escalated).total_seconds() < (
            ESCALATE_EVERY_S
        ):
            return 0
        self._escalated = now
        return sum(q.escalate(now) for q in self.by_type.values() if q.urgent)

    def without(self, task_ids: set[str]) -> ReadyQueues:
        """The same queues, same order, without ``task_ids`` (ended or no longer ours)."""
        kept = ReadyQueues(self.aging_s, self.urgency)
        for queue in self.by_type.values():
            for level in queue.levels:
                for rank, _, _, task in sorted(level.entries(), key=lambda e: e[:3]):
                    if task.task_id not in task_ids:
                        kept.push(task, front=rank == 0)
        return kept

    def types(self) -> list[str]:
        return [t for t, q in self.by_type.items() if q.size]

    def depth(self) -> dict[str, list[int]]:
        """Backlog per task type and level: what an autoscaler scales on."""
        return {t: q.depth_by_level() for t, q in self.by_type.items()}
