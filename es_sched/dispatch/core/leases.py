"""Leases with heartbeats and fencing.

A lease is granted per assignment with the next epoch of its task and a token chosen by the
caller (random in the shell; the core draws no randomness). A worker's heartbeat every ``h``
seconds extends all its leases to ``now + k*h`` (k in 3..6). ``expired(now)`` hands back the
leases to reclaim; their tasks go back to the head of their queue and the decider is told
(``dispatcher.lease_expired``), which fences any late completion by epoch and token.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from es_sched.errors import ConfigError


@dataclass
class Lease:
    task_id: str
    attempt: int
    worker_id: str
    epoch: int
    token: str
    expires_at: datetime
    started_at: datetime
    priority: int = 4
    tier: str | None = None  # the workflow's SLA tier (ADR 67): who may preempt it


@dataclass
class LeaseTable:
    heartbeat_s: float = 5.0
    k: int = 3  # the setting's default (ES_SCHED_DISPATCH_LEASE_K)
    leases: dict[str, Lease] = field(default_factory=dict)  # task id -> lease
    epochs: dict[str, int] = field(default_factory=dict)  # task id -> last epoch granted

    def __post_init__(self) -> None:
        if not 3 <= self.k <= 6:
            raise ConfigError(f"lease multiple k must be 3..6 heartbeats, got {self.k}")

    @property
    def ttl(self) -> timedelta:
        return timedelta(seconds=self.k * self.heartbeat_s)

    def grant(
        self,
        task_id: str,
        attempt: int,
        worker_id: str,
        token: str,
        now: datetime,
        priority: int = 4,
        tier: str | None = None,
    ) -> Lease:
        epoch = self.epochs.get(task_id, 0) + 1
        self.epochs[task_id] = epoch
        lease = Lease(
            task_id, attempt, worker_id, epoch, token, now + self.ttl, now, priority, tier
        )
        self.leases[task_id] = lease
        return lease

    def heartbeat(self, worker_id: str, now: datetime) -> int:
        """Extend every lease the worker holds; returns how many."""
        n = 0
        for lease in self.leases.values():
            if lease.worker_id == worker_id:
                lease.expires_at = now + self.ttl
                n += 1
        return n

    def resume(self, lease: Lease, last_epoch: int, now: datetime) -> Lease:
        """A lease rebuilt from the journal after a restart: a full TTL from ``now`` (the
        worker's next heartbeat extends it or its silence ends it), the epoch count kept."""
        lease.expires_at = now + self.ttl
        self.leases[lease.task_id] = lease
        self.seen_epoch(lease.task_id, max(last_epoch, lease.epoch))
        return lease

    def seen_epoch(self, task_id: str, epoch: int) -> None:
        """``epoch`` was granted for the task (maybe by an earlier process): the next grant
        takes a later one, so no DispatchTask input id repeats."""
        self.epochs[task_id] = max(self.epochs.get(task_id, 0), epoch)

    def release(self, task_id: str) -> Lease | None:
        return self.leases.pop(task_id, None)

    def expired(self, now: datetime) -> list[Lease]:
        gone = [lease for lease in self.leases.values() if lease.expires_at <= now]
        for lease in gone:
            del self.leases[lease.task_id]
        return gone

    def held_by(self, worker_id: str) -> list[Lease]:
        return [lease for lease in self.leases.values() if lease.worker_id == worker_id]

    def reclaim_worker(self, worker_id: str) -> list[Lease]:
        """A dead worker: every lease it held, removed."""
        gone = self.held_by(worker_id)
        for lease in gone:
            del self.leases[lease.task_id]
        return gone

    def preemptible(
        self, now: datetime, min_priority: int = 5, min_running_s: float = 60.0
    ) -> list[Lease]:
        """Long-running low-priority leases, oldest first: candidates to make room."""
        floor = now - timedelta(seconds=min_running_s)
        found = [
            lease
            for lease in self.leases.values()
            if lease.priority >= min_priority and lease.started_at <= floor
        ]
        return sorted(found, key=lambda lease: lease.started_at)
