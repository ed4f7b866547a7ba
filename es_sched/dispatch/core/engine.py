"""The dispatcher's decisions, tying queues, limits, placement and leases together.

``DispatchCore.dispatch(now, tokens)`` returns the next assignments: it takes the task type whose
next task goes first (``order.first``, ADR 69: the most urgent level, then the task nearest its
workflow's end) and that type's best ready task (priority or SLA tier and slack (``urgency``,
ADR 67), aging, tenant share (``fairshare``, ADR 68), oldest workflow first), checks its
concurrency, its type, rate-limit key and tenant rates and its tenant's quota (``limits``),
places it on a fitting worker, reserves the resources and grants a lease. A task that fits
nowhere may preempt a long-running task on a worker where it would then fit, as
``domain.sla.may_preempt`` allows (tierless: priority <= 1 over priority >= 5; tiered: two
tiers apart, ADR 67): the victim is handed back to the head of its queue (its attempt not
counted as a failure) and the urgent task takes its place. A task of a tier takes a pool slot
only if what is left covers the share the more urgent tiers reserve and its type's learned
failure rate is under its tier's breaker (``tiers``, ADR 67). Everything is in memory and
deterministic for a given input order and ``now`` (and, for ``learned``, the stats it answers
with).

A task whose resources are a cost model's estimate is placed by the estimate corrected by what
its type and size class measured (``learned``, a lookup of the analytics role's proposals;
the rule is ``domain.learned_cost.correct``, ADR 66): its assignment carries the corrected
resources, with what the correction used under ``learned``, so the worker admits it by the same
figures and an operator sees estimate against learned.

``resume`` puts back what the lease journal says about a task after a restart or a rebalance
(ADR 14): its live lease with its resources reserved and its concurrency slot held, or its place
at the head of its queue; either way the epochs go on from the last one granted. ``drop``
forgets tasks that are now another dispatcher's, without handing them back.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from es_sched.dispatch.core.fairshare import FairShare, TenantOrder, memo
from es_sched.dispatch.core.leases import Lease, LeaseTable
from es_sched.dispatch.core.limits import Limits
from es_sched.dispatch.core.order import Head, first
from es_sched.dispatch.core.placement import Fleet, Need, Placement, Policy
from es_sched.dispatch.core.queues import ReadyQueues, ReadyTask
from es_sched.domain import sla
from es_sched.domain.learned import RunStats, size_class
from es_sched.domain.learned_cost import ESTIMATE_KEY, correct

Learned = Callable[[str, str], RunStats | None]  # (task type, size class) -> latest stats


@dataclass(frozen=True)
class Assignment:
    task: ReadyTask
    placement: Placement
    lease: Lease
    resources: dict[str, Any] | None = None  # what it was placed by; None: as declared

    @property
    def placed_by(self) -> dict[str, Any]:
        return self.task.resources if self.resources is None else self.resources


@dataclass(frozen=True)
class Preemption:
    victim: Lease  # cancel this task on its worker; it is already back at the head of its queue


@dataclass(frozen=True)
class Journaled:
    """What the lease journal says about one task: its lease (None: it waits at the head of its
    queue) and the last epoch granted for it."""

    task: ReadyTask
    last_epoch: int
    lease: Lease | None = None
    gpu: int | None = None


@dataclass(frozen=True)
class WorkerDeath:
    """A worker this core declared dead (ADR 71): once per silence, the first ``expire`` that
    finds it dead, with the tasks whose leases were taken back from it since it was last heard
    from (expired, or reclaimed as it was declared dead). ``last_seen`` names the silence,
    so every dispatcher that declares the same death gives it the same alert id."""

    worker_id: str
    pool: str
    last_seen: datetime
    reclaimed: tuple[str, ...]


@dataclass
class _InFlight:
    task: ReadyTask
    need: Need
    placement: Placement


@dataclass
class DispatchCore:
    queues: ReadyQueues = field(default_factory=ReadyQueues)
    limits: Limits = field(default_factory=Limits)
    fleet: Fleet = field(default_factory=Fleet)
    leases: LeaseTable = field(default_factory=LeaseTable)
    pools: dict[str, str] = field(default_factory=dict)  # task type -> pool (default "default")
    policies: dict[str, Policy] = field(default_factory=dict)  # pool -> spread | binpack
    preempt_after_s: float = 60.0
    tiers: sla.TierPolicy = sla.NO_RESERVE  # slots each tier reserves in every pool
    # A task type's learned (failure rate, outcomes), for the tiers' breakers (ADR 67).
    failures: Callable[[str], tuple[float, int] | None] = field(default=lambda _type: None)
    in_flight: dict[str, _InFlight] = field(default_factory=dict)
    fair: FairShare = field(default_factory=FairShare)  # tenants' weights and tags (ADR 68)
    downstream_first: bool = True  # ADR 69; False: one task per type per round
    # worker -> the last_seen of the silence already declared dead, so it is declared once
    declared_dead: dict[str, datetime] = field(default_factory=dict)
    deaths: list[WorkerDeath] = field(default_factory=list)  # drained by ``take_deaths``
    # worker -> tasks whose leases were taken back since it was last heard from (its alert's)
    taken_back: dict[str, set[str]] = field(default_factory=dict)
    learned: Learned | None = None  # None: every task is placed as declared

    def __post_init__(self) -> None:
        self.fleet.heartbeat_s = self.leases.heartbeat_s  # one heartbeat for leases and liveness

    def enqueue(self, task: ReadyTask, front: bool = False) -> None:
        self.queues.push(task, front)

    def dispatch(
        self, now: datetime, token: Callable[[], str], limit: int = 1000
    ) -> list[Assignment | Preemption]:
        self.queues.escalate(now)  # SLA slack first: it may move a task to a lower level
        if self.downstream_first:
            return self._by_rank(now, token, limit)
        out: list[Assignment | Preemption] = []
        blocked: set[str] = set()
        while len(out) < limit:
            progressed = False
            for task_type in self.queues.types():
                if task_type in blocked:
                    continue
                decision = self._one(task_type, now, token)
                if decision is None:
                    blocked.add(task_type)
                    continue
                out += decision
                progressed = True
            if not progressed:
                return out
        return out

    def _by_rank(
        self, now: datetime, token: Callable[[], str], limit: int
    ) -> list[Assignment | Preemption]:
        """Again and again the type whose head goes first (``order.first``); a type whose head
        cannot start is passed over until the next call. A type's head is kept between starts
        while nothing it depends on changed (``_stale``): ranking every type's queue again for
        each start made a pass quadratic in the number of types."""
        out: list[Assignment | Preemption] = []
        blocked: set[str] = set()
        known: dict[str, tuple[float, int, ReadyTask] | None] = {}
        while len(out) < limit:
            heads: list[Head] = []
            orders: dict[str, TenantOrder] = {}  # per pool, each tenant ranked once per start
            for task_type in self.queues.types():
                if task_type in blocked:
                    continue
                if task_type not in known:
                    pool = self.pools.get(task_type, "default")
                    if pool not in orders:
                        orders[pool] = memo(self._tenant_order(pool))
                    known[task_type] = self.queues.by_type[task_type].head(now, orders[pool])
                head = self._head(task_type, known[task_type])
                if head is None:
                    blocked.add(task_type)
                else:
                    heads.append(head)
            if not heads:
                return out
            chosen = first(heads)
            decision = self._one(chosen.task_type, now, token, (chosen.level, chosen.task))
            if decision is None:
                blocked.add(chosen.task_type)
                continue
            out += decision
            for task_type in self._stale(chosen, decision, known):
                known.pop(task_type, None)
        return out

    def _head(self, task_type: str, found: tuple[float, int, ReadyTask] | None) -> Head | None:
        if found is None:
            return None
        effective, level, task = found
        pool = self.pools.get(task_type, "default")
        tag = self.fair.tag(pool, task.tenant) if self.fair.enabled else 0.0
        return Head(task_type, effective, level, task, tag)

    def _stale(
        self,
        started: Head,
        decision: list[Assignment | Preemption],
        known: dict[str, tuple[float, int, ReadyTask] | None],
    ) -> list[str]:
        """The types whose kept head may have changed with ``decision``: the started type; all
        after a preemption (its victim is queued again) or when the tenant has a quota (it may
        be full now, in every pool); else the types of the same pool where tenants share a
        level (the start moved the pool's fair-share tags, which order them)."""
        tenant = started.task.tenant
        if any(isinstance(d, Preemption) for d in decision) or (
            tenant is not None and tenant in self.limits.quotas
        ):
            return list(known)
        pool = self.pools.get(started.task_type, "default")
        return [started.task_type] + [
            t
            for t in known
            if self.pools.get(t, "default") == pool and self.queues.by_type[t].tenants_mixed()
        ]

    def _tenant_order(self, pool: str) -> TenantOrder:
        return self.fair.order(pool, self.limits.tenant_full)

    def _one(
        self,
        task_type: str,
        now: datetime,
        token: Callable[[], str],
        found: tuple[int, ReadyTask] | None = None,
    ) -> list[Assignment | Preemption] | None:
        """Start the next task of ``task_type`` (``found``: its level and task, when the caller
        has just ranked its queue)."""
        queue = self.queues.by_type[task_type]
        pool = self.pools.get(task_type, "default")
        if found is None:
            found = queue.next(now, self._tenant_order(pool))
        if found is None:
            return None
        level, task = found
        resources = self.placed_by(task)
        need = Need.of(resources)
        policy = self.policies.get(pool, "binpack")
        if not self._reserve_allows(task, pool, now) or self._breaker_holds(task):
            return None
        placement = self.fleet.place(pool, task_type, need, now, policy, task.task_id)
        victim = None
        if placement is None:
            band = sla.band_level(task.priority, task.sla_tier)
            if not sla.may_preempt_someone(task.sla_tier, band):
                return None
            victim = self._find_victim(
                pool, task_type, need, now, task.task_id, task.sla_tier, band
            )
            if victim is None:
                return None
        if (
            self.limits.admit(
                task_type, task.tenant, now, task.rate_limit_key, task.limits, task.partition
            )
            is not None
        ):
            return None
        queue.take(level, task)
        self.fair.charge(pool, task.tenant)
        decisions: list[Assignment | Preemption] = []
        if victim is not None:
            flight = self.finished(victim.task_id)
            if flight is not None:
                self.enqueue(flight.task, front=True)  # back at the head, attempt not counted
            decisions.append(Preemption(victim))
            placement = self.fleet.place(pool, task_type, need, now, policy, task.task_id)
            if placement is None:  # cannot happen: the victim's room was checked
                self.limits.finished(task_type, task.tenant)
                self.enqueue(task, front=True)
                return decisions
        assert placement is not None
        self.fleet.reserve(placement, need)
        lease = self.leases.grant(
            task.task_id,
            task.attempt,
            placement.worker_id,
            token(),
            now,
            task.priority,
            task.sla_tier,
        )
        self.in_flight[task.task_id] = _InFlight(task, need, placement)
        corrected = None if resources is task.resources else resources
        return [*decisions, Assignment(task, placement, lease, corrected)]

    def placed_by(self, task: ReadyTask) -> dict[str, Any]:
        """The resources to place ``task`` by: its declared ones, or, for a cost estimate, the
        estimate corrected by what its type and size class measured (the same object when
        nothing changed)."""
        if self.learned is None or ESTIMATE_KEY not in task.resources:
            return task.resources
        task_input = task.payload.get("input")
        subject = size_class(task_input if isinstance(task_input, dict) else {}, task.resources)
        corrected = correct(task.resources, self.learned(task.task_type, subject))
        return task.resources if corrected is None else corrected.resources

    def _reserve_allows(self, task: ReadyTask, pool: str, now: datetime) -> bool:
        """Whether the task's tier may take one of the pool's free slots (ADR 67)."""
        if task.sla_tier is None or not self.tiers.reserve:
            return True
        free, total = self.fleet.pool_slots(pool, now)
        return total == 0 or self.tiers.may_take(task.sla_tier, free, total)

    def _breaker_holds(self, task: ReadyTask) -> bool:
        """Whether the task's tier waits out its type's failures (ADR 67)."""
        if task.sla_tier is None or not self.tiers.breaker:
            return False
        learned = self.failures(task.task_type)
        return learned is not None and self.tiers.breaker_open(task.sla_tier, *learned)

    def _find_victim(
        self,
        pool: str,
        task_type: str,
        need: Need,
        now: datetime,
        task_id: str,
        tier: str | None = None,
        level: int = 0,
    ) -> Lease | None:
        """A long-running lease the urgent task may preempt (``domain.sla.may_preempt``) whose
        release makes room; nothing is changed."""
        running = self.leases.preemptible(now, min_priority=0, min_running_s=self.preempt_after_s)
        for lease in running:
            victim_level = sla.band_level(lease.priority, lease.tier)
            if not sla.may_preempt(tier, level, lease.tier, victim_level):
                continue
            flight = self.in_flight.get(lease.task_id)
            worker = self.fleet.workers.get(lease.worker_id)
            if flight is None or worker is None or worker.pool != pool:
                continue
            if not self.fleet.eligible(worker, task_type, now, task_id):
                continue
            self.fleet.release(flight.placement, flight.need)
            fits = worker.fits(need) is not None
            self.fleet.reserve(flight.placement, flight.need)
            if fits:
                return lease
        return None

    def finished(self, task_id: str) -> _InFlight | None:
        """The task ended (or was handed back): free its resources, lease and concurrency slot."""
        flight = self.in_flight.pop(task_id, None)
        self.leases.release(task_id)
        if flight is not None:
            self.fleet.release(flight.placement, flight.need)
            self.limits.finished(flight.task.task_type, flight.task.tenant)
        return flight

    def resume(self, entry: Journaled, now: datetime) -> None:
        """Rebuild one journaled task (nothing here may know it yet): a lease gets a full TTL
        from ``now``; the worker's reports then confirm it or release it, as for any lease."""
        task, lease = entry.task, entry.lease
        self.leases.seen_epoch(task.task_id, entry.last_epoch)
        if lease is None:
            self.enqueue(task, front=True)
            return
        # Corrected by what is known now: the worker's reports say what it admitted it with.
        need, placement = Need.of(self.placed_by(task)), Placement(lease.worker_id, entry.gpu)
        self.fleet.reserve(placement, need)
        self.limits.resumed(task.task_type, task.tenant)
        self.leases.resume(lease, entry.last_epoch, now)
        self.in_flight[task.task_id] = _InFlight(task, need, placement)

    def drop(self, task_ids: set[str]) -> None:
        """Another dispatcher owns these tasks now (their ready partition moved): forget their
        leases and queue places without handing anything back; the new owner resumes them."""
        for task_id in task_ids:
            self.finished(task_id)
        self.queues = self.queues.without(task_ids)

    def observe(self, worker_id: str, held: set[str], use: Need) -> None:
        """A status report: the worker holds ``held`` (running or queued) using ``use`` in all.
        What it holds beyond the tasks we placed there is another dispatcher's: foreign use."""
        self.taken_back.pop(worker_id, None)  # heard from: what it lost is no death's
        own, count = Need(), 0
        for task_id in held:
            flight = self.in_flight.get(task_id)
            if flight is not None and flight.placement.worker_id == worker_id:
                own, count = own.plus(flight.need), count + 1
        self.fleet.set_foreign(worker_id, use.plus(own, -1), len(held) - count)

    def expire(self, now: datetime) -> list[Lease]:
        """Expired leases and those of dead workers: their tasks go back to the queue head, and
        a worker that let a lease expire gets no new one until it is heard from again."""
        gone = self.leases.expired(now)
        for lease in gone:
            self.fleet.lease_lost(lease.worker_id, now)
            self.taken_back.setdefault(lease.worker_id, set()).add(lease.task_id)
        for worker in list(self.fleet.workers.values()):
            if self.fleet.status(worker, now) == "dead":
                reclaimed = self.leases.reclaim_worker(worker.worker_id)
                gone += reclaimed
                self._declare_dead(worker.worker_id, worker.pool, worker.last_seen, reclaimed)
        for lease in gone:
            self._requeue(lease.task_id)
        return gone

    def _declare_dead(
        self, worker_id: str, pool: str, last_seen: datetime | None, reclaimed: list[Lease]
    ) -> None:
        # Its leases usually expired before its silence made it dead: count those too.
        lost = self.taken_back.setdefault(worker_id, set())
        lost.update(lease.task_id for lease in reclaimed)
        # A worker never heard from is "dead" to placement, yet nothing died: no alert.
        if last_seen is None or self.declared_dead.get(worker_id) == last_seen:
            return
        self.declared_dead[worker_id] = last_seen
        tasks = tuple(sorted(self.taken_back.pop(worker_id)))
        self.deaths.append(WorkerDeath(worker_id, pool, last_seen, tasks))

    def take_deaths(self) -> list[WorkerDeath]:
        """The workers declared dead since the last call (the shell raises their alerts)."""
        out, self.deaths = self.deaths, []
        return out

    def given_back(self, task_id: str, epoch: int) -> Lease | None:
        """The decider ended this lease without us (its worker declined it, ADR 24 a): the
        task goes back to the head of its queue as on expiry. Another epoch's lease is not the
        one that ended (ours expired already, or the task was leased again): None."""
        lease = self.leases.leases.get(task_id)
        if lease is None or lease.epoch != epoch:
            return None
        self.leases.release(task_id)
        self._requeue(task_id)
        return lease

    def rekeyed(self, worker_id: str, running: set[str]) -> list[Lease]:
        """The worker came back as a new process with a new lease key (ADR 74): the leases it
        does not run were sealed to its old key, which no one can open any more; they go back
        to the head of their queues now rather than when their TTL runs out. Not the worker's
        fault: no lease is counted as lost."""
        gone = [lease for lease in self.leases.held_by(worker_id) if lease.task_id not in running]
        for lease in gone:
            self.leases.release(lease.task_id)
            self._requeue(lease.task_id)
        return gone

    def _requeue(self, task_id: str) -> None:
        flight = self.in_flight.pop(task_id, None)
        if flight is not None:
            self.fleet.release(flight.placement, flight.need)
            self.limits.finished(flight.task.task_type, flight.task.tenant)
            self.enqueue(flight.task, front=True)
