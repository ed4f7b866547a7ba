"""Rate and concurrency limits: one model, fed by two sources (ADR 13).

A **rate** is Conductor's ``rateLimitPerFrequency`` per ``rateLimitFrequencyInSeconds``: at most
``count`` tasks start in any ``seconds``-long window. Like Conductor's ``RedisRateLimitingDAO``
(a sorted set of start times per task definition, trimmed to the window) each bucket keeps a log
of start times and admits while fewer than ``count`` lie in the last ``seconds``. A run-time
``{"rate": R, "burst": B}`` from the config topic is the same rule, ``B`` per ``B / R`` seconds:
the long-run rate R and never more than B at once.

Buckets and where their rules come from:

- ``type:T``: every task of type T; config ``rate:type:T``, and the TaskDef's rate of a task of
  T without a ``rateLimitKey``.
- ``key:K``: every task whose evaluated ``rateLimitKey`` is K, whatever its type (one bucket
  shared across types); the TaskDef's rate of such a task, and config ``rate:key:K``.
- ``tenant:X``: every task of tenant X; config ``rate:tenant:X``.

Concurrency is per task type (Conductor's ``concurrentExecLimit``: tasks in progress of the
definition): the smaller of config ``concurrency:T`` and the head task's TaskDef limit. 0 in a
TaskDef means no limit, as in Conductor. A tenant's concurrency quota (config ``tenant:X``'s
``quota``, ADR 68) bounds its tasks in flight, whatever their type. Every rule that applies
must allow a task; it then counts in every bucket it was checked against, and a refused task
counts nowhere.

Global limits across dispatchers: a type's tasks and a key's tasks share one ready partition
(the record's key), so one dispatcher sees them all. A tenant spans partitions, so its count is
dealt to the ready partitions (``units``) and a core that ``own``s some partitions admits only
the units of those. Whatever a core gains (a tenant share, or a partition and so the type and
key buckets living there) is entered as used up at the moment it is gained: the previous owner
may have used all of it in the last window, and it is never used twice. A tenant's quota is
dealt the same way: a core admits the tenant's tasks while its own in-flight count is below its
units, so the cores together never hold more than the quota (a quota smaller than the number of
ready partitions leaves some partitions none: give a quota of at least that many). A core that
was never told what it owns (one dispatcher, the tests) owns every partition.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from es_sched.domain.definitions import NO_LIMITS, TaskLimits

__all__ = ["NO_LIMITS", "Limits", "Log", "Ownership", "Rate", "TaskLimits", "rate_of", "units"]

Scope = tuple[str, str]  # ("type" | "key" | "tenant", name)
_EPOCH, _US = datetime(1970, 1, 1, tzinfo=UTC), timedelta(microseconds=1)


def _us(now: datetime) -> int:
    """Exact microseconds since the epoch: window edges never blur in float arithmetic."""
    return (now - _EPOCH) // _US


def _span(seconds: float) -> int:
    return round(seconds * 1_000_000)


@dataclass(frozen=True)
class Rate:
    """At most ``count`` starts in any ``seconds``-long window."""

    count: int
    seconds: float

    @classmethod
    def per_second(cls, rate: float, burst: float | None = None) -> Rate:
        """A token bucket's ``rate``/``burst`` as a window: ``burst`` per ``burst / rate`` s."""
        count = max(1, int(burst if burst is not None else max(1.0, rate)))
        return cls(count, count / rate)


def rate_of(task: TaskLimits) -> Rate | None:
    """A TaskDef's rate; none when either number is 0 or less, as in Conductor."""
    if task.rate_per_frequency <= 0 or task.frequency_s <= 0:
        return None
    return Rate(task.rate_per_frequency, float(task.frequency_s))


def units(count: int, partitions: int, partition: int) -> int:
    """The units of a ``count``-wide limit dealt to ``partition`` of ``partitions``: spread
    evenly (every partition gets the floor or the ceiling of count/partitions, in order), so
    contiguous ranges of partitions (the range assignor's) get shares close to their size."""
    return (partition + 1) * count // partitions - partition * count // partitions


@dataclass(frozen=True)
class Ownership:
    partitions: frozenset[int]
    total: int

    def share(self, count: int) -> int:
        return sum(units(count, self.total, p) for p in self.partitions)


class Log:
    """Start times (epoch microseconds) in one bucket, oldest first; phantom entries included.
    A start at t counts in the window (now - seconds, now]: it frees up ``seconds`` later."""

    def __init__(self) -> None:
        self.times: list[int] = []

    def used(self, now: int, seconds: float) -> int:
        return len(self.times) - bisect.bisect_right(self.times, now - _span(seconds))

    def add(self, now: int, n: int = 1) -> None:
        if self.times and now < self.times[-1]:
            now = self.times[-1]  # a clock stepping back keeps the log sorted (later = safer)
        self.times.extend([now] * n)

    def trim(self, now: int, horizon: float) -> None:
        del self.times[: bisect.bisect_right(self.times, now - _span(horizon))]


@dataclass
class Limits:
    rates: dict[Scope, Rate] = field(default_factory=dict)  # from the config topic
    concurrency: dict[str, int] = field(default_factory=dict)  # task type -> limit (config)
    in_flight: dict[str, int] = field(default_factory=dict)
    quotas: dict[str, int] = field(default_factory=dict)  # tenant -> in flight at most (config)
    tenant_in_flight: dict[str, int] = field(default_factory=dict)
    refused: dict[str, int] = field(default_factory=dict)  # reason -> count, for metrics
    owned: Ownership | None = None  # None: every ready partition is ours
    logs: dict[Scope, Log] = field(default_factory=dict)
    horizon: dict[Scope, float] = field(default_factory=dict)  # longest window seen per bucket
    _gained: dict[Scope, int] = field(default_factory=dict)  # share gained, not yet entered
    gained_at: dict[int, int] = field(default_factory=dict)  # partition -> when gained (us)
    seeded: dict[Scope, int] = field(default_factory=dict)  # bucket -> gain entered for
    _revoked: frozenset[int] = frozenset()  # revoked by the last rebalance

    # -- config ----------------------------------------------------------------------------
    def set_rate(self, scope: Scope, rate: Rate | None) -> None:
        before = self._share(scope)
        if rate is None:
            self.rates.pop(scope, None)
        else:
            self.rates[scope] = rate
        self._gain(scope, before)

    def set_concurrency(self, task_type: str, limit: int | None) -> None:
        if limit is None:
            self.concurrency.pop(task_type, None)
        else:
            self.concurrency[task_type] = limit

    def set_quota(self, tenant: str, quota: int | None) -> None:
        if quota is None:
            self.quotas.pop(tenant, None)
        else:
            self.quotas[tenant] = quota

    def quota(self, tenant: str) -> int | None:
        """The tasks of ``tenant`` this core may hold in flight (None: no quota)."""
        total = self.quotas.get(tenant)
        if total is None or self.owned is None:
            return total
        return self.owned.share(total)

    def tenant_full(self, tenant: str | None) -> bool:
        """Whether ``tenant`` holds its whole quota here: its tasks wait, others' go."""
        if tenant is None:
            return False
        quota = self.quota(tenant)
        return quota is not None and self.tenant_in_flight.get(tenant, 0) >= quota

    def own(
        self,
        partitions: frozenset[int],
        total: int,
        now: datetime,
        held: frozenset[int] | None = None,
    ) -> None:
        """The ready partitions this core owns changed. ``held``: those nobody else can have
        used meanwhile (default: the ones owned until now; none at the first call). Tenant
        shares follow the partitions; every bucket of a partition gained beyond ``held`` is
        entered as used up at this moment, since its previous owner may have used it all."""
        if held is None:
            held = self.owned.partitions if self.owned is not None else frozenset()
        before = {
            s: Ownership(held, total).share(self.rates[s].count) for s in self._tenant_scopes()
        }
        self.owned = Ownership(partitions, total)
        t = _us(now)
        for p in partitions - held:
            self.gained_at[p] = t
        for scope, share in before.items():
            self._gain(scope, share)
        self._settle(t)

    def assigned(self, partitions: Iterable[int], total: int, now: datetime) -> None:
        """The consumer group gave us these ready partitions (eager: all; cooperative: more).
        One revoked from us just before and handed straight back was nobody else's."""
        mine = self.owned.partitions if self.owned is not None else frozenset()
        new = mine | frozenset(partitions)
        self.own(new, total, now, held=mine | (self._revoked & new))
        self._revoked = frozenset()

    def revoked(self, partitions: Iterable[int], now: datetime, lost: bool = False) -> None:
        """These ready partitions are no longer ours; ``lost``: the group moved on without us
        (another member may have owned them since)."""
        gone = frozenset(partitions)
        self._revoked = frozenset() if lost else gone
        if self.owned is not None:
            self.own(self.owned.partitions - gone, self.owned.total, now)

    def share(self, tenant: str) -> int | None:
        """The starts per window this core may give ``tenant`` (None: no tenant limit)."""
        return self._share(("tenant", tenant))

    # -- decisions -------------------------------------------------------------------------
    def admit(
        self,
        task_type: str,
        tenant: str | None,
        now: datetime,
        key: str | None = None,
        task: TaskLimits = NO_LIMITS,
        partition: int | None = None,
    ) -> str | None:
        """None when the task may start now (counted in its buckets), else the refusing limit.
        ``partition``: the ready partition the task came from (its type and key buckets live
        there)."""
        bound = self.concurrency.get(task_type)
        if task.concurrent > 0:
            bound = task.concurrent if bound is None else min(bound, task.concurrent)
        if bound is not None and self.in_flight.get(task_type, 0) >= bound:
            return self._refuse("concurrency")
        if self.tenant_full(tenant):
            return self._refuse("tenant_quota")
        t = _us(now)
        self._settle(t)
        checks = self._checks(task_type, tenant, key, task)
        gained = self.gained_at.get(partition, -1) if partition is not None else -1
        for scope, allowed, seconds in checks:
            if scope[0] != "tenant" and self.seeded.get(scope, -1) < gained:
                self._enter(scope, gained, allowed, seconds)  # the previous owner's, maybe
                self.seeded[scope] = gained
        for scope, allowed, seconds in checks:
            log = self.logs.get(scope)
            if (log.used(t, seconds) if log else 0) >= allowed:
                return self._refuse(f"{scope[0]}_rate")
        for scope in dict.fromkeys(scope for scope, _, _ in checks):
            windows = [s for sc, _, s in checks if sc == scope]
            self.horizon[scope] = max(self.horizon.get(scope, 0.0), *windows)
            log = self.logs.setdefault(scope, Log())
            log.trim(t, self.horizon[scope])
            log.add(t)
        self._hold(task_type, tenant)
        return None

    def finished(self, task_type: str, tenant: str | None = None) -> None:
        self.in_flight[task_type] = max(0, self.in_flight.get(task_type, 0) - 1)
        if tenant is not None:
            self.tenant_in_flight[tenant] = max(0, self.tenant_in_flight.get(tenant, 0) - 1)

    def resumed(self, task_type: str, tenant: str | None = None) -> None:
        """A lease rebuilt after a restart holds its slot again (its start was counted then)."""
        self._hold(task_type, tenant)

    def _hold(self, task_type: str, tenant: str | None) -> None:
        self.in_flight[task_type] = self.in_flight.get(task_type, 0) + 1
        if tenant is not None:
            self.tenant_in_flight[tenant] = self.tenant_in_flight.get(tenant, 0) + 1

    # -- internals -------------------------------------------------------------------------
    def _checks(
        self, task_type: str, tenant: str | None, key: str | None, task: TaskLimits
    ) -> list[tuple[Scope, int, float]]:
        """(bucket, starts allowed per window, window) for every rule that applies."""
        out: list[tuple[Scope, int, float]] = []
        own = rate_of(task)
        if own is not None:
            out.append((("key", key) if key else ("type", task_type), own.count, own.seconds))
        for scope in (("type", task_type), ("key", key or ""), ("tenant", tenant or "")):
            rate = self.rates.get(scope) if scope[1] else None
            if rate is not None:
                allowed = self._share(scope)
                out.append((scope, rate.count if allowed is None else allowed, rate.seconds))
        return out

    def _share(self, scope: Scope) -> int | None:
        rate = self.rates.get(scope)
        if rate is None:
            return None
        if scope[0] != "tenant" or self.owned is None:
            return rate.count
        return self.owned.share(rate.count)

    def _tenant_scopes(self) -> list[Scope]:
        return [scope for scope in self.rates if scope[0] == "tenant"]

    def _gain(self, scope: Scope, before: int | None) -> None:
        """Record a share that grew (or appeared) under partial ownership: it is entered as
        used when next settled, so it frees up only one window later."""
        after = self._share(scope)
        if self.owned is None or scope[0] != "tenant" or after is None:
            return
        grown = after - (before or 0)
        if grown > 0:
            self._gained[scope] = self._gained.get(scope, 0) + grown

    def _settle(self, t: int) -> None:
        for scope, n in self._gained.items():
            rate = self.rates.get(scope)
            if rate is not None:
                self._enter(scope, t, n, rate.seconds)
        self._gained.clear()

    def _enter(self, scope: Scope, t: int, n: int, seconds: float) -> None:
        """``n`` phantom starts at ``t``: a share that may have been used elsewhere."""
        self.horizon[scope] = max(self.horizon.get(scope, 0.0), seconds)
        self.logs.setdefault(scope, Log()).add(t, n)

    def _refuse(self, reason: str) -> str:
        self.refused[reason] = self.refused.get(reason, 0) + 1
        return reason
