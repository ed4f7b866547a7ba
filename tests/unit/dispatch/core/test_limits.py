"""The dispatcher core's limits (ADR 13): TaskDef rates and concurrency, rate-limit keys shared
across types, and tenant shares that hold across dispatchers whatever the rebalances."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

from es_sched.dispatch.core.limits import Limits, Ownership, Rate, TaskLimits, units

T0 = datetime(2026, 5, 1, 9, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(milliseconds=round(seconds * 1000))


def worst_window(times: list[float], seconds: float) -> int:
    """The most starts in any half-open window [x, x + seconds), counted in whole ms."""
    ms, span = sorted(round(t * 1000) for t in times), round(seconds * 1000)
    worst, j = 0, 0
    for i, t in enumerate(ms):
        while ms[j] <= t - span:
            j += 1
        worst = max(worst, i - j + 1)
    return worst


def test_a_taskdef_rate_admits_exactly_its_count_per_window() -> None:
    limits, td = Limits(), TaskLimits(rate_per_frequency=3, frequency_s=2)
    started = [t / 10 for t in range(100) if limits.admit("enc", None, at(t / 10), task=td) is None]
    assert worst_window(started, 2.0) == 3
    assert len(started) == 15  # 3 per 2 s over 10 s: the limit is used, not only bounded
    assert limits.refused["type_rate"] > 0


@pytest.mark.parametrize(
    "td", [TaskLimits(), TaskLimits(rate_per_frequency=5, frequency_s=0), TaskLimits(0, 1, 0)]
)
def test_zero_means_no_limit_as_in_conductor(td: TaskLimits) -> None:
    limits = Limits()
    assert all(limits.admit("enc", None, T0, task=td) is None for _ in range(1000))


def test_concurrent_exec_limit_bounds_tasks_in_flight_and_config_can_tighten_it() -> None:
    limits, td = Limits(), TaskLimits(concurrent=3)
    assert [limits.admit("enc", None, T0, task=td) for _ in range(4)] == [None] * 3 + [
        "concurrency"
    ]
    limits.finished("enc")
    assert limits.admit("enc", None, T0, task=td) is None
    limits.set_concurrency("enc", 1)  # both sources apply: the smaller wins
    limits.finished("enc")
    assert limits.admit("enc", None, T0, task=td) == "concurrency"


def test_a_rate_limit_key_is_one_bucket_across_task_types() -> None:
    limits, td = Limits(), TaskLimits(rate_per_frequency=2, frequency_s=1)
    assert limits.admit("a", None, T0, key="cdn", task=td) is None
    assert limits.admit("b", None, T0, key="cdn", task=td) is None
    assert limits.admit("c", None, T0, key="cdn", task=td) == "key_rate"  # shared: 2 in all
    assert limits.admit("a", None, T0, key="other", task=td) is None  # another key, own bucket
    assert limits.admit("a", None, T0, task=td) is None  # no key: the type's own bucket
    assert limits.admit("b", None, at(1.0), key="cdn", task=td) is None  # a window later


def test_config_and_taskdef_rates_both_hold() -> None:
    limits = Limits()
    limits.set_rate(("key", "cdn"), Rate.per_second(1))
    td = TaskLimits(rate_per_frequency=5, frequency_s=1)
    assert limits.admit("a", None, T0, key="cdn", task=td) is None
    assert limits.admit("b", None, T0, key="cdn", task=td) == "key_rate"


@pytest.mark.parametrize(("count", "partitions"), [(1, 12), (2, 12), (5, 12), (12, 12), (37, 8)])
def test_units_are_dealt_evenly_and_add_up_to_the_limit(count: int, partitions: int) -> None:
    dealt = [units(count, partitions, p) for p in range(partitions)]
    assert sum(dealt) == count
    assert max(dealt) - min(dealt) <= 1
    halves = [frozenset(range(partitions // 2)), frozenset(range(partitions // 2, partitions))]
    shares = [Ownership(h, partitions).share(count) for h in halves]
    assert sum(shares) == count and abs(shares[0] - shares[1]) <= 1  # the range assignor's


def test_a_gained_share_starts_used_up_so_a_rebalance_never_bursts() -> None:
    limits = Limits()
    limits.set_rate(("tenant", "acme"), Rate(4, 1.0))
    limits.own(frozenset({0, 1}), 4, T0)  # half the partitions: 2 of the 4 units
    assert limits.share("acme") == 2
    assert limits.admit("enc", "acme", at(0.5), task=TaskLimits()) == "tenant_rate"
    assert limits.admit("enc", "acme", at(1.0), task=TaskLimits()) is None
    assert limits.admit("enc", "acme", at(1.0), task=TaskLimits()) is None
    assert limits.admit("enc", "acme", at(1.0), task=TaskLimits()) == "tenant_rate"
    limits.own(frozenset({0, 1, 2, 3}), 4, at(1.2))  # gains 2 units: used until 2.2
    assert limits.admit("enc", "acme", at(1.9)) == "tenant_rate"  # ours at 1.0 still count
    # ours at 1.0 have expired; the 2 gained units may have been used by their previous
    # owner up to 1.2, so of the 4 only 2 are free until 2.2
    assert [limits.admit("enc", "acme", at(2.1)) for _ in range(3)] == [None, None, "tenant_rate"]
    assert [limits.admit("enc", "acme", at(2.2)) for _ in range(3)] == [None, None, "tenant_rate"]


def test_two_cores_sharing_a_tenant_never_exceed_it_across_random_rebalances() -> None:
    """Two dispatchers, 6 ready partitions moved between them at random (a partition is
    owned by at most one at a time, as in a consumer group), each admitting as fast as it
    may: in every window the two together start at most the tenant's count."""
    for seed in range(200):
        rng = random.Random(seed)  # noqa: S311 (a reproducible schedule, not a secret)
        count, seconds, partitions = rng.randint(2, 9), rng.choice([0.5, 1.0, 2.0]), 6
        cores = [Limits(), Limits()]
        for core in cores:
            core.set_rate(("tenant", "t"), Rate(count, seconds))
        owner = [rng.randrange(2) for _ in range(partitions)]
        started: list[float] = []
        t = 0.0
        for core_index, core in enumerate(cores):
            core.own(
                frozenset(p for p in range(partitions) if owner[p] == core_index), partitions, at(t)
            )
        while t < 20:
            t = round(t + rng.choice([0.01, 0.05, 0.1]), 3)
            if rng.random() < 0.05:  # a rebalance: revoke first, then assign (eager protocol)
                new_owner = [rng.randrange(2) for _ in range(partitions)]
                for i, core in enumerate(cores):
                    kept = {p for p in range(partitions) if owner[p] == i == new_owner[p]}
                    core.own(frozenset(kept), partitions, at(t))
                for i, core in enumerate(cores):
                    mine = {p for p in range(partitions) if new_owner[p] == i}
                    core.own(frozenset(mine), partitions, at(t))
                owner = new_owner
            for core in cores:
                while core.admit("enc", "t", at(t)) is None:
                    started.append(t)
        assert worst_window(started, seconds) <= count, (seed, count, seconds)
        assert started, seed  # the limit is shared, not stuck


def test_a_tenant_limit_appearing_under_partial_ownership_starts_used_up() -> None:
    limits = Limits()
    limits.own(frozenset({0}), 2, T0)
    assert limits.admit("enc", "acme", T0) is None  # no limit yet
    limits.set_rate(("tenant", "acme"), Rate(4, 1.0))  # our share: 2
    assert limits.admit("enc", "acme", at(0.1)) == "tenant_rate"
    assert limits.admit("enc", "acme", at(1.1)) is None


def test_a_type_bucket_gained_with_its_partition_starts_used_up_unless_handed_straight_back() -> (
    None
):
    limits, td = Limits(), TaskLimits(rate_per_frequency=2, frequency_s=1)

    def go(t: float) -> str | None:
        return limits.admit("enc", None, at(t), task=td, partition=0)

    limits.assigned([0], 1, T0)  # the previous owner may have started 2 just now
    assert go(0.5) == "type_rate"
    assert [go(1.0), go(1.0), go(1.0)] == [None, None, "type_rate"]
    limits.revoked([0], at(1.1))  # an eager rebalance that gives the partition back
    limits.assigned([0], 1, at(1.1))
    assert [go(2.0), go(2.0)] == [None, None]  # nothing entered: nobody else held it
    limits.revoked([0], at(2.1), lost=True)  # the group moved on without us meanwhile
    limits.assigned([0], 1, at(2.5))
    assert go(3.4) == "type_rate" and go(3.5) is None
