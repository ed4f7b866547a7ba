"""Ready queues: 9 priority levels per task type, aging, and "finish what is started".

Order inside a level is by the workflow's start time, then arrival: tasks of workflows that
started earlier go first, so a downstream task of a running workflow beats the first task of a
newer one, and tasks of one workflow stay FIFO. Across levels the head with the lowest
*effective* level wins, where waiting lowers a task's level by one per ``aging_s`` seconds, so
nothing starves. A task handed back (lease expired, preempted) goes to the head of its level.

Which level a task sits at is the SLA component's (``urgency``, ADR 67): its priority, or for a
workflow with a tier the tier's band, lowered as its deadline's slack shrinks. ``escalate``
moves a task to the lower level its slack now asks for; levels only ever drop, as slack does.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

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
        self.levels: list[list[tuple[int, float, int, ReadyTask]]] = [[] for _ in range(LEVELS)]
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
        heapq.heappush(self.levels[level], key)
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
            heap = self.levels[level]
            at = next((i for i, e in enumerate(heap) if e[3] is task), None)
            if at is None:  # cannot happen: only pop takes a task out, and forgets it here
                del self.urgent[task_id]
                continue
            rank, started, seq, _ = heap[at]
            heap[at] = heap[-1]
            heap.pop()
            heapq.heapify(heap)
            heapq.heappush(self.levels[lower], (rank, started, seq, task))
            self.urgent[task_id] = (lower, task)
            moved += 1
        return moved

    def _effective(self, level: int, now: datetime) -> float:
        head = self.levels[level][0][3]
        waited = (now - head.enqueued_at).total_seconds()
        return level - (waited / self.aging_s if self.aging_s > 0 else 0.0)

    def best_level(self, now: datetime) -> int | None:
        best: tuple[float, float, int, int] | None = None
        for level in range(LEVELS):
            heap = self.levels[level]
            if not heap:
                continue
            rank, started, seq, _ = heap[0]
            handed_back = rank == 0  # requeued at the head: before anything else
            effective = -1.0 if handed_back else max(0.0, self._effective(level, now))
            key = (effective, started, seq, level)
            if best is None or key < best:
                best = key
        return None if best is None else best[3]

    def peek(self, now: datetime) -> ReadyTask | None:
        level = self.best_level(now)
        return None if level is None else self.levels[level][0][3]

    def pop(self, now: datetime) -> ReadyTask | None:
        level = self.best_level(now)
        if level is None:
            return None
        self.size -= 1
        task = heapq.heappop(self.levels[level])[3]
        self.urgent.pop(task.task_id, None)
        return task

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
                for rank, _, _, task in sorted(level, key=lambda e: e[:3]):
                    if task.task_id not in task_ids:
                        kept.push(task, front=rank == 0)
        return kept

    def types(self) -> list[str]:
        return [t for t, q in self.by_type.items() if q.size]

    def depth(self) -> dict[str, list[int]]:
        """Backlog per task type and level: what an autoscaler scales on."""
        return {t: q.depth_by_level() for t, q in self.by_type.items()}
