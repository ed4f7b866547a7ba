"""Ready queues: 9 priority levels per task type, aging, and "finish what is started".

Order inside a level is by the workflow's start time, then arrival: tasks of workflows that
started earlier go first, so a downstream task of a running workflow beats the first task of a
newer one, and tasks of one workflow stay FIFO. Across levels the head with the lowest
*effective* level wins, where waiting lowers a task's level by one per ``aging_s`` seconds, so
nothing starves. A task handed back (lease expired, preempted) goes to the head of its level.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

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


class TypeQueue:
    """The 9 levels of one task type."""

    def __init__(self, aging_s: float) -> None:
        self.aging_s = aging_s
        self.levels: list[list[tuple[int, float, int, ReadyTask]]] = [[] for _ in range(LEVELS)]
        self._seq = itertools.count()
        self.size = 0

    def push(self, task: ReadyTask, front: bool = False) -> None:
        level = min(max(task.priority, 0), LEVELS - 1)
        key = (0 if front else 1, task.workflow_started_at.timestamp(), next(self._seq), task)
        heapq.heappush(self.levels[level], key)
        self.size += 1

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
        return heapq.heappop(self.levels[level])[3]

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
                for rank, _, _, task in sorted(level, key=lambda e: e[:3]):
                    if task.task_id not in task_ids:
                        kept.push(task, front=rank == 0)
        return kept

    def types(self) -> list[str]:
        return [t for t, q in self.by_type.items() if q.size]

    def depth(self) -> dict[str, list[int]]:
        """Backlog per task type and level: what an autoscaler scales on."""
        return {t: q.depth_by_level() for t, q in self.by_type.items()}
