"""SLA tiers and deadlines (ADR 67): the rules, pure, in one place.

A workflow may carry a tier, ``P0`` (most urgent) to ``P3`` (bulk), and a deadline; both are
recorded in ``workflow.started``. A workflow without a tier keeps today's rules (its priority
is its level; preemption by priority), so nothing changes for callers that never ask.

- **Level band**: a tier confines its tasks' queue level (0..8) to a band: ``P0`` 0..1, ``P1``
  2..3, ``P2`` 4..5, ``P3`` 6..8; the workflow's priority picks the level inside the band.
  Bands do not overlap, so tier decides before priority and aging only reorders within a band
  until it crosses one, as it does for priorities today.
- **Slack** = deadline - now - the expected remaining critical path (the dispatcher estimates it
  from learned run times, ``expected_remaining``). **Escalation**: when slack falls under
  ``escalate_s`` a task's level drops towards the floor of its band, one step per
  ``escalate_s / band width``; a task past its deadline sits at the floor. It never leaves its
  band: a late bulk task does not overtake an urgent one.
- **Reserved share**: a tier may reserve a share of each pool's task slots (to the nearest whole
  slot, never all of them); a task takes a slot only if the slots left after it still cover
  what every more urgent tier reserves. A tierless task is exempt (today's behaviour).
- **Breaker**: a tier may stop taking tasks of a type whose learned failure rate (the analytics
  role's, over its window) is above the tier's threshold, so bulk work does not feed a failing
  dependency while urgent work still tries. Advisory, like every learned value.
- **Preemption**: a tiered task may preempt a tiered task at least two tiers below it (P0 may
  preempt P2 and P3, P1 may preempt P3); a P3 never preempts. Tierless on either side: the
  priority rule of old (level <= 1 preempts level >= 5).
- **Events**: ``workflow.sla_at_risk`` when ``AT_RISK_SHARE`` of the window from start to
  deadline is left and the workflow still runs; ``workflow.sla_breached`` when the deadline
  passes before the workflow ended. The decider writes both on its own timers (``timers``), so
  replay and I5 reproduce them; the at-risk point is a share of the window rather than the
  learned slack because the decider reads no statistics.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from es_sched.domain.definitions import WorkflowDef, WorkflowTask
from es_sched.domain.pickling import frozen_by_constructor

TIERS = ("P0", "P1", "P2", "P3")
BANDS: dict[str, tuple[int, int]] = {"P0": (0, 1), "P1": (2, 3), "P2": (4, 5), "P3": (6, 8)}
AT_RISK_SHARE = 0.2  # the last fifth of the window: at risk
MAX_DEADLINE_S = 366 * 24 * 3600.0  # a year: beyond it, a typo rather than an SLA
PREEMPT_OLD_URGENT, PREEMPT_OLD_VICTIM = 1, 5  # the tierless rule (priority levels)
PREEMPT_TIER_GAP = 2
BREAKER_MIN_OUTCOMES = 10
MAX_RETRIES = 100  # Conductor's TaskDef allows any count; past this it is a typo, not a policy


def rank(tier: str | None) -> int | None:
    return TIERS.index(tier) if tier in TIERS else None


def refusal(
    tier: str | None, deadline: datetime | None, now: datetime, submitting: bool = False
) -> str | None:
    """Why a start's tier or deadline is refused, or None when they are acceptable. A client
    ``submitting`` refuses a deadline already past; the decider does not (a start that waited
    in the log past its deadline is started and breached at once, not lost)."""
    if tier is not None and tier not in TIERS:
        return f"unknown SLA tier {tier!r}: one of {', '.join(TIERS)}"
    if deadline is None:
        return None
    if deadline.tzinfo is None:
        return "deadline must carry a time zone (RFC 3339, e.g. ...Z)"
    left = (deadline - now).total_seconds()
    if submitting and left <= 0:
        return f"deadline {deadline.isoformat()} is not in the future"
    if left > MAX_DEADLINE_S:
        return f"deadline {deadline.isoformat()} is more than a year away"
    return None


def retries_refusal(retries: int | None) -> str | None:
    """Why a start's per-tier retry count is refused (None: acceptable or absent)."""
    if retries is None:
        return None
    if isinstance(retries, bool) or not isinstance(retries, int) or not 0 <= retries <= MAX_RETRIES:
        return f"SLA retries must be an integer from 0 to {MAX_RETRIES}, got {retries!r}"
    return None


def retries(tier_retries: int | None, retry_count: int) -> int:
    """How many times a failed worker task of the workflow is retried: its tier's count where
    the start recorded one (seed 004 gives each tier its own retries: an urgent tier retries
    more, bulk less, so a failing bulk type does not flood the workers with retries), else its
    TaskDef's ``retryCount``."""
    return retry_count if tier_retries is None else tier_retries


def at_risk_at(started: datetime, deadline: datetime) -> datetime:
    """When a workflow started at ``started`` is at risk of missing ``deadline``."""
    return deadline - timedelta(seconds=AT_RISK_SHARE * (deadline - started).total_seconds())


def band_level(priority: int, tier: str | None) -> int:
    """The queue level of a task of ``priority`` in a workflow of ``tier``, before escalation."""
    band = BANDS.get(tier or "")
    level = min(max(priority, 0), 8)
    return level if band is None else min(max(level, band[0]), band[1])


def slack_s(deadline: datetime, now: datetime, remaining_s: float) -> float:
    return (deadline - now).total_seconds() - remaining_s


def level(priority: int, tier: str | None, slack: float | None, escalate_s: float) -> int:
    """The queue level: the band level, lowered towards the band's floor as slack shrinks."""
    base = band_level(priority, tier)
    band = BANDS.get(tier or "")
    if slack is None or band is None or escalate_s <= 0 or slack >= escalate_s:
        return base
    width = band[1] - band[0]
    if slack <= 0 or width == 0:
        return band[0]
    drop = math.ceil(width * (1.0 - slack / escalate_s))
    return max(band[0], base - drop)


@dataclass(frozen=True)
class TierPolicy:
    """Per-tier settings (``es_sched.settings``): the share of each pool's slots reserved, and
    the breaker: the learned failure rate of a task type above which a tier's tasks of that
    type wait (0: never)."""

    reserve: Mapping[str, float]
    breaker: Mapping[str, float] = field(default_factory=dict)

    def breaker_open(self, tier: str | None, failure_rate: float, outcomes: int) -> bool:
        """Whether a task of ``tier`` waits because its type fails this often lately: only
        past ``BREAKER_MIN_OUTCOMES`` outcomes, so a couple of early failures trip nothing."""
        threshold = self.breaker.get(tier or "", 0.0)
        return 0 < threshold < failure_rate and outcomes >= BREAKER_MIN_OUTCOMES

    def held_back(self, tier: str | None, total_slots: int) -> int:
        """Slots a task of ``tier`` must leave free: what the more urgent tiers reserve."""
        r = rank(tier)
        if r is None:
            return 0
        share = sum(self.reserve.get(t, 0.0) for t in TIERS[:r])
        # To the nearest whole slot, and never the whole pool: a pool of one slot reserved
        # for P0 would never run a bulk task at all.
        return min(math.floor(share * total_slots + 0.5), max(0, total_slots - 1))

    def may_take(self, tier: str | None, free_slots: int, total_slots: int) -> bool:
        return free_slots - 1 >= self.held_back(tier, total_slots)


NO_RESERVE = TierPolicy({})


def may_preempt(
    urgent_tier: str | None, urgent_level: int, victim_tier: str | None, victim_level: int
) -> bool:
    """Whether a task may take the place of a running one (both found fitting elsewhere)."""
    ur, vr = rank(urgent_tier), rank(victim_tier)
    if ur is not None and vr is not None:
        return vr - ur >= PREEMPT_TIER_GAP
    if (ur is not None and ur > 0) or (vr is not None and vr < len(TIERS) - 1):
        return False  # only P0 preempts a tierless task; only a P3 yields to one
    return urgent_level <= PREEMPT_OLD_URGENT and victim_level >= PREEMPT_OLD_VICTIM


def may_preempt_someone(tier: str | None, level: int) -> bool:
    """Whether ``may_preempt`` can allow this task anything: a quick no for most tasks."""
    r = rank(tier)
    if r is not None:
        return r <= len(TIERS) - 1 - PREEMPT_TIER_GAP
    return level <= PREEMPT_OLD_URGENT


# -- the remaining critical path ----------------------------------------------------------
WORKER_TYPES = frozenset({"SIMPLE"})


def _longest(tasks: Iterable[WorkflowTask]) -> tuple[str, ...]:
    """The worker task names along the longest chain through ``tasks`` (in order): a fork's or
    a switch's longest branch, a loop's body once."""
    out: tuple[str, ...] = ()
    for t in tasks:
        if t.type in WORKER_TYPES:
            out += (t.name,)
        branches = list(t.children())
        if branches:
            out += max((_longest(b) for b in branches), key=len, default=())
    return out


def chain_after(definition: WorkflowDef, ref: str) -> tuple[str, ...]:
    """The names of the worker tasks left after ``ref`` on the longest chain of the definition:
    the rest of its own list, then the rest of each enclosing list. A static approximation
    (by task count; the dispatcher weighs the names by run time) that ignores which switch
    case will run and how often a loop turns."""
    out: tuple[str, ...] = ()
    loc = definition.index.get(ref)
    while loc is not None:
        out += _longest(loc.siblings[loc.position + 1 :])
        loc = definition.index.get(loc.container) if loc.container is not None else None
    return out


def expected_remaining(
    own_s: float, after: Iterable[str], estimate: Mapping[str, float], typical_s: float
) -> float:
    """The expected remaining critical path of a ready task: its own expected run time plus
    the expected run times of the chain after it (a learned value where known, else
    ``typical_s``)."""
    return own_s + sum(estimate.get(name, typical_s) for name in after)


frozen_by_constructor(globals())  # pickled through constructors (domain.pickling, ADR 51)
