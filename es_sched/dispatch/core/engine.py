"""The dispatcher's decisions, tying queues, limits, placement and leases together.

``DispatchCore.dispatch(now, tokens)`` returns the next assignments: for every task type with a
backlog it takes the best ready task (priority, aging, oldest workflow first), checks its
concurrency and its type, rate-limit key and tenant rates (``limits``), places it on a fitting
worker, reserves the resources and grants a lease. A task that fits nowhere may preempt a
long-running task on a worker where it would then fit, as ``domain.sla.may_preempt`` allows
(tierless: priority <= 1 over priority >= 5; tiered: two tiers apart, ADR 67): the victim is
handed back to the head of its queue (its attempt not counted as a failure) and the urgent task
takes its place. A task of a tier takes a pool slot only if what is left covers the share the
more urgent tiers reserve and its type's learned failure rate is under its tier's breaker
(``tiers``, ADR 67). Everything is in memory and deterministic for a
given input order and ``now``.

``resume`` puts back what the lease journal says about a task after a restart or a rebalance
(ADR 14): its live lease with its resources reserved and its concurrency slot held, or its place
at the head of its queue; either way the epochs go on from the last one granted. ``drop``
forgets tasks that are now another dispatcher's, without handing them back.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from es_sched.dispatch.core.leases import Lease, LeaseTable
from es_sched.dispatch.core.limits import Limits
from es_sched.dispatch.core.placement import Fleet, Need, Placement, Policy
from es_sched.dispatch.core.queues import ReadyQueues, ReadyTask
from es_sched.domain import sla


@dataclass(frozen=True)
class Assignment:
    task: ReadyTask
    placement: Placement
    lease: Lease


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

    def __post_init__(self) -> None:
        self.fleet.heartbeat_s = self.leases.heartbeat_s  # one heartbeat for leases and liveness

    def enqueue(self, task: ReadyTask, front: bool = False) -> None:
        self.queues.push(task, front)

    def dispatch(
        self, now: datetime, token: Callable[[], str], limit: int = 1000
    ) -> list[Assignment | Preemption]:
        out: list[Assignment | Preemption] = []
        blocked: set[str] = set()
        self.queues.escalate(now)
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

    def _one(
        self, task_type: str, now: datetime, token: Callable[[], str]
    ) -> list[Assignment | Preemption] | None:
        queue = self.queues.by_type[task_type]
        task = queue.peek(now)
        if task is None:
            return None
        need = Need.of(task.resources)
        pool = self.pools.get(task_type, "default")
        policy = self.policies.get(pool, "binpack")
        if not self._reserve_allows(task, pool, now) or self._breaker_holds(task):
            return None
        placement = self.fleet.place(pool, task_type, need, now, policy)
        victim = None
        if placement is None:
            level = sla.band_level(task.priority, task.sla_tier)
            if not sla.may_preempt_someone(task.sla_tier, level):
                return None
            victim = self._find_victim(pool, task_type, need, now, task.sla_tier, level)
            if victim is None:
                return None
        if (
            self.limits.admit(
                task_type, task.tenant, now, task.rate_limit_key, task.limits, task.partition
            )
            is not None
        ):
            return None
        popped = queue.pop(now)
        assert popped is task  # nothing changed the queue since the peek
        decisions: list[Assignment | Preemption] = []
        if victim is not None:
            flight = self.finished(victim.task_id)
            if flight is not None:
                self.enqueue(flight.task, front=True)  # back at the head, attempt not counted
            decisions.append(Preemption(victim))
            placement = self.fleet.place(pool, task_type, need, now, policy)
            if placement is None:  # cannot happen: the victim's room was checked
                self.limits.finished(task_type)
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
        return [*decisions, Assignment(task, placement, lease)]

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
            if not self.fleet.eligible(worker, task_type, now):
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
            self.limits.finished(flight.task.task_type)
        return flight

    def resume(self, entry: Journaled, now: datetime) -> None:
        """Rebuild one journaled task (nothing here may know it yet): a lease gets a full TTL
        from ``now``; the worker's reports then confirm it or release it, as for any lease."""
        task, lease = entry.task, entry.lease
        self.leases.seen_epoch(task.task_id, entry.last_epoch)
        if lease is None:
            self.enqueue(task, front=True)
            return
        need, placement = Need.of(task.resources), Placement(lease.worker_id, entry.gpu)
        self.fleet.reserve(placement, need)
        self.limits.resumed(task.task_type)
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
        for worker in list(self.fleet.workers.values()):
            if self.fleet.status(worker, now) == "dead":
                gone += self.leases.reclaim_worker(worker.worker_id)
        for lease in gone:
            self._requeue(lease.task_id)
        return gone

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

    def _requeue(self, task_id: str) -> None:
        flight = self.in_flight.pop(task_id, None)
        if flight is not None:
            self.fleet.release(flight.placement, flight.need)
            self.limits.finished(flight.task.task_type)
            self.enqueue(flight.task, front=True)
