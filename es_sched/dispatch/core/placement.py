"""Resource-aware placement over a fleet of workers, never overcommitting one.

A worker offers cpu, memory, custom units, task slots (its concurrency) and GPU devices (each
with its free memory); the dispatcher reserves what each in-flight task declared (and one slot)
and releases it when the task ends, so free = capacity - reservations - foreign use (for a GPU:
the free memory the worker reports minus our reservations, since other processes share the
device). Foreign use is what the worker reports holding for tasks this dispatcher did not place
(another dispatcher of the group placed them): ``DispatchCore.observe`` derives it from each
status report, so dispatchers sharing workers see each other's work one heartbeat late. The
worker SDK admits a task only when it fits what its running tasks leave (ADR 6), so that
window can delay a task, never overcommit a worker. ``place`` picks, within a pool, a live,
unbanned, non-blacklisted worker that serves the task type and fits every dimension: ``binpack`` the
tightest fit (fewest free cpus that suffice), ``spread`` the loosest. Candidates come from a
per-pool index sorted by free cpu, so a decision is a bisection plus a short walk.

Live means heartbeating now, not merely not yet suspect: a worker silent for
``QUIET_HEARTBEATS`` heartbeats, or one that let a lease expire and has not been heard from
since, gets no new lease. A frozen worker (SIGSTOP, a long GC pause, a saturated host) would
otherwise be handed its expired task again at every expiry until it turned suspect, and run
those stale epochs when it woke (issue 12).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Literal

from es_sched.blacklist import (
    COMPLETED,
    Blacklisting,
    Failure,
    Lifted,
    Window,
    blame,
)
from es_sched.blacklist import Policy as BlacklistPolicy
from es_sched.liveness import Health, Liveness
from es_sched.versions import Versions

Policy = Literal["spread", "binpack"]
QUIET_HEARTBEATS = 2.0  # silence that ends a worker's new leases; a lease lasts 3..6 heartbeats


@dataclass(frozen=True)
class Need:
    cpu: float = 0.0
    memory_mb: int = 0
    gpu_memory_mb: int = 0
    custom: tuple[tuple[str, float], ...] = ()

    def plus(self, other: Need, sign: int = 1) -> Need:
        custom = dict(self.custom)
        for key, amount in other.custom:
            custom[key] = custom.get(key, 0.0) + sign * amount
        return Need(
            self.cpu + sign * other.cpu,
            self.memory_mb + sign * other.memory_mb,
            self.gpu_memory_mb + sign * other.gpu_memory_mb,
            tuple(sorted(custom.items())),
        )

    def floor(self) -> Need:
        """No dimension below zero (a report can lag behind our own reservations)."""
        return Need(
            max(0.0, self.cpu),
            max(0, self.memory_mb),
            max(0, self.gpu_memory_mb),
            tuple((k, max(0.0, v)) for k, v in self.custom if v > 0),
        )

    @classmethod
    def of(cls, resources: dict[str, object]) -> Need:
        custom = resources.get("custom") or {}
        assert isinstance(custom, dict)
        return cls(
            float(resources.get("cpu") or 0),  # type: ignore[arg-type]
            int(resources.get("memory_mb") or 0),  # type: ignore[call-overload]
            int(resources.get("gpu_memory_mb") or 0),  # type: ignore[call-overload]
            tuple(sorted((str(k), float(v)) for k, v in custom.items())),
        )


@dataclass
class Gpu:
    index: int
    total_mb: int
    reported_free_mb: int
    reserved_mb: int = 0

    @property
    def free_mb(self) -> int:
        # Conservative: what the device reported free, minus what we reserved since. A task
        # already running may be counted twice (under-commit), never forgotten (overcommit).
        return min(self.reported_free_mb, self.total_mb) - self.reserved_mb


@dataclass
class WorkerView:
    worker_id: str
    pool: str
    version: str
    types: frozenset[str]
    cpu: float
    memory_mb: int
    gpus: list[Gpu] = field(default_factory=list)
    custom: dict[str, float] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    reserved_cpu: float = 0.0
    reserved_memory_mb: int = 0
    reserved_custom: dict[str, float] = field(default_factory=dict)
    slots: int | None = None  # tasks at once (the worker's concurrency); None: no bound
    reserved_slots: int = 0
    foreign: Need = Need()  # held for tasks another dispatcher placed
    foreign_slots: int = 0
    last_seen: datetime | None = None
    lease_lost_at: datetime | None = None  # when a lease it held last expired

    @property
    def free_cpu(self) -> float:
        return self.cpu - self.reserved_cpu - self.foreign.cpu

    def fits(self, need: Need) -> int | None:
        """-1 when it fits without a GPU, the GPU index when it needs one, None when not."""
        if self.slots is not None and self.reserved_slots + self.foreign_slots >= self.slots:
            return None
        if (
            need.cpu > self.free_cpu + 1e-9
            or need.memory_mb > self.memory_mb - self.reserved_memory_mb - self.foreign.memory_mb
        ):
            return None
        foreign = dict(self.foreign.custom)
        for key, amount in need.custom:
            used = self.reserved_custom.get(key, 0.0) + foreign.get(key, 0.0)
            if amount > self.custom.get(key, 0.0) - used + 1e-9:
                return None
        if need.gpu_memory_mb <= 0:
            return -1
        fitting = [g for g in self.gpus if g.free_mb >= need.gpu_memory_mb]
        return min(fitting, key=lambda g: g.free_mb).index if fitting else None


@dataclass(frozen=True)
class Placement:
    worker_id: str
    gpu: int | None  # device index to pin (CUDA_VISIBLE_DEVICES), None without a GPU


class Fleet:
    def __init__(
        self,
        suspect_after_s: float = 15.0,
        dead_after_s: float = 60.0,
        blacklist_policy: BlacklistPolicy | None = None,
    ) -> None:
        self.workers: dict[str, WorkerView] = {}
        # Blacklistings in force, by worker, as the config topic says (every dispatcher the
        # same); kept apart from ``workers`` since a record may come before the worker's report.
        self.blacklist: dict[str, Blacklisting] = {}
        self.blacklist_policy = blacklist_policy or BlacklistPolicy()
        self.windows: dict[str, Window] = {}  # this dispatcher's placements' outcomes, by worker
        self.index: dict[str, list[tuple[float, str]]] = {}  # pool -> sorted (free cpu, id)
        self.banned_versions: set[str] = set()
        self.versions = Versions()  # rules, stops and rollouts by failure rate (ADR 70)
        self.liveness = Liveness(suspect_after_s, dead_after_s)
        self.heartbeat_s = 5.0  # the lease table's (``DispatchCore`` keeps them equal)

    # -- membership ------------------------------------------------------------------------
    def upsert(self, worker: WorkerView) -> None:
        old = self.workers.get(worker.worker_id)
        if old is not None:
            self._unindex(old)
            worker.reserved_cpu, worker.reserved_memory_mb = (
                old.reserved_cpu,
                old.reserved_memory_mb,
            )
            worker.reserved_custom, worker.reserved_slots = old.reserved_custom, old.reserved_slots
            worker.foreign, worker.foreign_slots = old.foreign, old.foreign_slots
            worker.lease_lost_at = old.lease_lost_at
            reserved = {g.index: g.reserved_mb for g in old.gpus}
            for g in worker.gpus:
                g.reserved_mb = reserved.get(g.index, 0)
        self.workers[worker.worker_id] = worker
        self._index(worker)

    def set_foreign(self, worker_id: str, use: Need, slots: int) -> None:
        w = self.workers.get(worker_id)
        if w is None:
            return
        self._unindex(w)
        w.foreign, w.foreign_slots = use.floor(), max(0, slots)
        self._index(w)

    def remove(self, worker_id: str) -> None:
        worker = self.workers.pop(worker_id, None)
        if worker is not None:
            self._unindex(worker)

    def status(self, worker: WorkerView, now: datetime) -> Health:
        """``es_sched.liveness``'s rule, the read side's too, on when it was last heard from."""
        return self.liveness.health(worker.last_seen, now)

    def heartbeating(self, worker: WorkerView, now: datetime) -> bool:
        """Heard from within ``QUIET_HEARTBEATS`` heartbeats, and since its last lease expired."""
        seen = worker.last_seen
        if seen is None or now - seen >= timedelta(seconds=QUIET_HEARTBEATS * self.heartbeat_s):
            return False
        return worker.lease_lost_at is None or seen >= worker.lease_lost_at

    def lease_lost(self, worker_id: str, now: datetime) -> None:
        """A lease of this worker expired: no new lease until it is heard from again."""
        w = self.workers.get(worker_id)
        if w is not None:
            w.lease_lost_at = now

    def _index(self, w: WorkerView) -> None:
        bisect.insort(self.index.setdefault(w.pool, []), (w.free_cpu, w.worker_id))

    def _unindex(self, w: WorkerView) -> None:
        row = self.index.get(w.pool, [])
        i = bisect.bisect_left(row, (w.free_cpu, w.worker_id))
        if i < len(row) and row[i] == (w.free_cpu, w.worker_id):
            row.pop(i)

    # -- decisions -------------------------------------------------------------------------
    def eligible(self, w: WorkerView, task_type: str, now: datetime, task_id: str = "") -> bool:
        return (
            task_type in w.types
            and w.version not in self.banned_versions
            and self.versions.admits(task_type, w.version, task_id)
            and not self.blacklisted(w.worker_id, now)
            and self.status(w, now) == "alive"
            and self.heartbeating(w, now)
        )

    def place(
        self,
        pool: str,
        task_type: str,
        need: Need,
        now: datetime,
        policy: Policy = "binpack",
        task_id: str = "",
    ) -> Placement | None:
        """A worker for this task (``task_id`` picks its side of a version rollout)."""
        row = self.index.get(pool, [])
        start = bisect.bisect_left(row, (need.cpu - 1e-9, ""))
        order = (
            range(start, len(row)) if policy == "binpack" else range(len(row) - 1, start - 1, -1)
        )
        for i in order:
            w = self.workers[row[i][1]]
            if not self.eligible(w, task_type, now, task_id):
                continue
            gpu = w.fits(need)
            if gpu is not None:
                return Placement(w.worker_id, None if gpu < 0 else gpu)
        return None

    def pool_slots(self, pool: str, now: datetime) -> tuple[int, int]:
        """Free and total task slots of the pool's live workers with a bounded concurrency:
        what a tier's reserved share is a share of (ADR 67)."""
        free = total = 0
        for _, worker_id in self.index.get(pool, []):
            w = self.workers[worker_id]
            if w.slots is None or self.status(w, now) != "alive" or not self.heartbeating(w, now):
                continue
            total += w.slots
            free += max(0, w.slots - w.reserved_slots - w.foreign_slots)
        return free, total

    def reserve(self, placement: Placement, need: Need) -> None:
        self._adjust(placement, need, +1)

    def release(self, placement: Placement, need: Need) -> None:
        self._adjust(placement, need, -1)

    def _adjust(self, placement: Placement, need: Need, sign: int) -> None:
        w = self.workers.get(placement.worker_id)
        if w is None:
            return
        self._unindex(w)
        w.reserved_cpu = max(0.0, w.reserved_cpu + sign * need.cpu)
        w.reserved_memory_mb = max(0, w.reserved_memory_mb + sign * need.memory_mb)
        w.reserved_slots = max(0, w.reserved_slots + sign)
        for key, amount in need.custom:
            w.reserved_custom[key] = max(0.0, w.reserved_custom.get(key, 0.0) + sign * amount)
        if placement.gpu is not None:
            for g in w.gpus:
                if g.index == placement.gpu:
                    g.reserved_mb = max(0, g.reserved_mb + sign * need.gpu_memory_mb)
        self._index(w)

    def version_held(self, pool: str, task_type: str, now: datetime) -> str | None:
        """Why no live worker of the pool serving ``task_type`` may take any of its tasks by
        the version rules (ADR 70); None when one may, or when none serves it at all."""
        reasons: list[str] = []
        for w in self.workers.values():
            if w.pool != pool or task_type not in w.types or not self.heartbeating(w, now):
                continue
            why = self.versions.why_not(task_type, w.version)
            if why is None:
                return None
            reasons.append(why)
        return "; ".join(sorted(set(reasons))) or None

    # -- protection (ADR 58) ---------------------------------------------------------------
    def blacklisted(self, worker_id: str, now: datetime) -> bool:
        b = self.blacklist.get(worker_id)
        return b is not None and b.active(now)

    def record_outcome(
        self,
        worker_id: str,
        kind: str,
        now: datetime,
        task_id: str = "",
        reason: str = "",
        terminal: bool = False,
        host_fault: bool = False,
        by: str = "",
    ) -> Blacklisting | None:
        """Count one end of a task this dispatcher placed on ``worker_id`` (``blacklist.blame``
        says whether and how); the blacklisting it decides, if any, to be published. The
        caller publishes it and applies it (``apply_blacklist``) like any other dispatcher's."""
        fault = blame(kind, terminal, host_fault)
        if fault is None and kind != COMPLETED:
            return None  # neither for nor against the worker
        if self.blacklisted(worker_id, now):
            return None  # a late end of a task placed before; the bench decides nothing new
        policy = self.blacklist_policy
        window = self.windows.setdefault(worker_id, Window(policy.window))
        window.add(None if fault is None else Failure(task_id, reason, now, fault))
        w = self.workers.get(worker_id)
        decided = window.verdict(worker_id, w.pool if w else "default", now, policy, by)
        if decided is not None:
            window.outcomes.clear()
        return decided

    def apply_blacklist(self, change: Blacklisting | Lifted) -> None:
        """A ``blacklist:<worker>`` record, ours or another dispatcher's: in force, or lifted
        (the worker starts again with an empty window)."""
        if isinstance(change, Lifted):
            self.blacklist.pop(change.worker_id, None)
            self.windows.pop(change.worker_id, None)
        else:
            self.blacklist[change.worker_id] = change

    def forget_blacklist(self, worker_id: str) -> None:
        """The record is gone (a tombstone): nothing in force."""
        self.blacklist.pop(worker_id, None)
