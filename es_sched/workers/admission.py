"""What a worker's held tasks use, and whether one more fits (the worker's own admission).

The dispatcher never places more than a worker's free capacity by its own books, but several
dispatchers share the fleet and see each other's placements only through the workers' status
reports, one heartbeat late. So the worker is the last line (ADR 6): a task starts only when
its declared cpu, memory, custom units and GPU memory (on its pinned device) fit what the
running tasks leave; otherwise it waits, still leased, until one ends. A task that does not
fit an idle worker starts anyway: waiting would never make room.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from es_sched.serialization import wire
from es_sched.workers.capacity import Capacity


@dataclass
class Use:
    cpu: float = 0.0
    memory_mb: int = 0
    gpu_memory_mb: dict[int, int] = field(default_factory=dict)  # device -> declared MiB
    custom: dict[str, float] = field(default_factory=dict)

    def add(self, a: wire.Assignment) -> Use:
        res = a.resources
        self.cpu += float(res.get("cpu") or 0)
        self.memory_mb += int(res.get("memory_mb") or 0)
        gpu_mb = int(res.get("gpu_memory_mb") or 0)
        if gpu_mb and a.gpu is not None:
            self.gpu_memory_mb[a.gpu] = self.gpu_memory_mb.get(a.gpu, 0) + gpu_mb
        for key, amount in (res.get("custom") or {}).items():
            self.custom[str(key)] = self.custom.get(str(key), 0.0) + float(amount)
        return self

    def report(self) -> dict[str, Any]:
        """The ``used`` field of a ``WorkerStatus`` (the dispatcher's ``Need.of`` reads it)."""
        return {
            "cpu": round(self.cpu, 6),
            "memory_mb": self.memory_mb,
            "gpu_memory_mb": sum(self.gpu_memory_mb.values()),
            "custom": dict(self.custom),
        }


def use_of(assignments: Iterable[wire.Assignment]) -> Use:
    use = Use()
    for a in assignments:
        use.add(a)
    return use


def admits(capacity: Capacity, running: list[wire.Assignment], a: wire.Assignment) -> bool:
    if not running:
        return True
    held, need = use_of(running), use_of([a])
    if held.cpu + need.cpu > capacity.cpu + 1e-9:
        return False
    if held.memory_mb + need.memory_mb > capacity.memory_mb:
        return False
    for key, amount in need.custom.items():
        if held.custom.get(key, 0.0) + amount > capacity.custom.get(key, 0.0) + 1e-9:
            return False
    for device, mb in need.gpu_memory_mb.items():
        total = next((g.total_mb for g in capacity.gpus if g.index == device), None)
        if total is not None and held.gpu_memory_mb.get(device, 0) + mb > total:
            return False
    return True
