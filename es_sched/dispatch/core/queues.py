"""Ready queues: 9 priority levels per task type, aging, and "finish what is started".

Order inside a level is by the workflow's start time, then arrival: tasks of workflows that
started earlier go first, so a downstream task of a running workflow beats the first task of a
newer one, and tasks of one workflow stay FIFO. Between tenants a level is shared by weight
(``fairshare``, ADR 68): each tenant keeps that order among its own tasks, and the ``TenantOrder``
the dispatcher passes says which tenant goes next. Across levels the head with the lowest
*effective* level wins, where waiting lowers a task's level by one per ``aging_s`` seconds, so
nothing starves. A task handed back (lease expired, preempted) goes to the head of its level.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from es_sched.dispatch.core.fairshare import Level, TenantOrder
from es_sched.dispatch.core.limits import NO_LIMITS, TaskLimits

LEVELS = 9  # 0 highest ... 8 lowest


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


class TypeQueue:
    """The 9 levels of one task type."""

    def __init__(self, aging_s: float) -> None:
        self.aging_s = aging_s
        self.levels: list[Level] = [Level() for _ in range(LEVELS)]
        self._seq = itertools.count()
        self.size = 0

    def push(self, task: ReadyTask, front: bool = False) -> None:
        level = min(max(task.priority, 0), LEVELS - 1)
        key = (0 if front else 1, task.workflow_started_at.timestamp(), next(self._seq), task)
        self.levels[level].push(key)
        self.size += 1

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

    def pop(self, now: datetime, order: TenantOrder | None = None) -> ReadyTask | None:
        level = self.best_level(now, order)
        if level is None:
            return None
        entry = self.levels[level].pop(order)
        assert entry is not None
        self.size -= 1
        return entry[3]

    def tenants_mixed(self) -> bool:
        """Whether some level holds tasks of more than one tenant (their order then depends
        on the fair-share tags)."""
        return any(len(level.heaps) > 1 for level in self.levels)

    def depth_by_level(self) -> list[int]:
        return [len(level) for level in self.levels]


class ReadyQueues:
    def __init__(self, aging_s: float = 60.0) -> None:
        self.aging_s = aging_s
        self.by_type: dict[str, TypeQueue] = {}

    def push(self, task: ReadyTask, front: bool = False) -> None:
        queue = self.by_type.get(task.task_type)
        if queue is None:
            queue = self.by_type[task.task_type] = TypeQueue(self.aging_s)
        queue.push(task, front)

    def without(self, task_ids: set[str]) -> ReadyQueues:
        """The same queues, same order, without ``task_ids`` (ended or no longer ours)."""
        kept = ReadyQueues(self.aging_s)
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
