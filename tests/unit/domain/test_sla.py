"""SLA tiers (ADR 67): the pure rules of ``domain.sla`` and the decider's SLA events, written on
its own timers at the right time, reproduced by replay (I5)."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

import pytest

from es_sched.audit.check import check
from es_sched.domain import commands as c
from es_sched.domain import sla
from es_sched.domain.decide import decide
from es_sched.domain.effects import ClearTimer, SetTimer, StartChild, child_input, effects
from es_sched.domain.events import Event, WorkflowSlaAtRisk, WorkflowSlaBreached
from es_sched.domain.evolve import fold
from es_sched.domain.ids import counter_ids, timer_id
from es_sched.domain.parsed import parse_workflow_cached
from es_sched.domain.refusals import refusal
from es_sched.domain.timers import SLA_TIMERS, timer_input
from es_sched.serialization import decode_input, encode_input
from es_sched.serialization.records import decode_timer, encode_timer
from tests.unit.audit.recorded import Recording, recorded
from tests.unit.domain.harness import SCRIPTS, T0, task, workflow

TWO = workflow(task("a", "enc"), task("b", "pack"), name="two")


# -- levels, slack, escalation --------------------------------------------------------------
def test_a_tier_confines_the_level_to_its_band_and_no_tier_keeps_the_priority() -> None:
    assert [sla.band_level(4, t) for t in sla.TIERS] == [1, 3, 4, 6]
    assert sla.band_level(0, "P3") == 6 and sla.band_level(8, "P0") == 1
    assert [sla.band_level(p, None) for p in (0, 4, 8)] == [0, 4, 8]


def test_escalation_lowers_the_level_within_the_band_as_slack_shrinks() -> None:
    # P3, priority 8: band 6..8; escalation starts under 60 s of slack.
    levels = [sla.level(8, "P3", slack, 60.0) for slack in (120, 60, 45, 20, 1, 0, -5)]
    assert levels == [8, 8, 7, 6, 6, 6, 6]
    assert levels == sorted(levels, reverse=True)  # never rises as slack shrinks
    assert sla.level(4, "P0", -1.0, 60.0) == 0  # late: the floor of the band
    assert sla.level(8, "P3", -100.0, 60.0) == 6  # ... and never another tier's band
    assert sla.level(8, "P3", 1.0, 0.0) == 8  # escalation off
    assert sla.level(7, None, -100.0, 60.0) == 7  # no tier: priority alone


def test_slack_is_the_deadline_less_now_less_the_expected_remaining_path() -> None:
    deadline = T0 + timedelta(seconds=30)
    remaining = sla.expected_remaining(4.0, ("pack", "notify", "pack"), {"pack": 2.0}, 1.0)
    assert remaining == 4.0 + 2.0 + 1.0 + 2.0
    assert sla.slack_s(deadline, T0 + timedelta(seconds=10), remaining) == 11.0


def test_the_chain_after_a_task_takes_the_longest_branch_of_what_follows() -> None:
    d = workflow(
        task("a", "enc"),
        task(
            "fork",
            type_="FORK_JOIN",
            forkTasks=[[task("x", "thumb")], [task("y1", "enc2"), task("y2", "qc")]],
        ),
        task("join", type_="JOIN", joinOn=["x", "y2"]),
        task("b", "pack"),
        name="chain",
    )
    definition, problems = parse_workflow_cached(d)
    assert definition is not None and not problems
    assert sla.chain_after(definition, "a") == ("enc2", "qc", "pack")
    assert sla.chain_after(definition, "y1") == ("qc", "pack")  # then what follows the fork
    assert sla.chain_after(definition, "b") == ()


# -- reserved share and preemption ----------------------------------------------------------
def test_a_p0_reserve_keeps_the_last_slots_from_lower_tiers() -> None:
    policy = sla.TierPolicy({"P0": 0.2})
    assert policy.held_back("P3", 10) == 2 and policy.held_back("P0", 10) == 0
    assert policy.may_take("P3", free_slots=3, total_slots=10)
    assert not policy.may_take("P3", free_slots=2, total_slots=10)  # the last two are P0's
    assert policy.may_take("P0", free_slots=1, total_slots=10)
    assert policy.may_take(None, free_slots=1, total_slots=10)  # tierless: not held back
    assert policy.held_back("P3", 3) == 1  # 0.6 of a slot: to the nearest whole slot
    assert policy.held_back("P3", 1) == 0  # never a whole pool: the bulk would never run
    assert policy.may_take("P3", free_slots=1, total_slots=1)


def test_a_breaker_opens_past_its_threshold_once_enough_outcomes_were_seen() -> None:
    policy = sla.TierPolicy({}, {"P3": 0.5})
    assert policy.breaker_open("P3", 0.6, sla.BREAKER_MIN_OUTCOMES)
    assert not policy.breaker_open("P3", 0.6, sla.BREAKER_MIN_OUTCOMES - 1)
    assert not policy.breaker_open("P3", 0.5, 100)
    assert not policy.breaker_open("P0", 1.0, 100) and not policy.breaker_open(None, 1.0, 100)


def test_preemption_respects_tiers() -> None:
    assert sla.may_preempt("P0", 0, "P3", 8) and sla.may_preempt("P0", 1, "P2", 4)
    assert not sla.may_preempt("P0", 0, "P1", 2)  # one tier apart: not enough
    assert sla.may_preempt("P1", 2, "P3", 6)
    for victim in ("P0", "P1", "P2"):
        assert not sla.may_preempt("P3", 6, victim, 0)
    assert not sla.may_preempt("P3", 6, "P3", 8)
    assert sla.may_preempt(None, 0, None, 7) and not sla.may_preempt(None, 2, None, 7)
    assert sla.may_preempt(None, 0, "P3", 6) and not sla.may_preempt(None, 0, "P2", 5)
    assert sla.may_preempt("P0", 0, None, 5) and not sla.may_preempt("P1", 2, None, 8)
    assert [sla.may_preempt_someone(t, 0) for t in sla.TIERS] == [True, True, False, False]


# -- starting with a tier and a deadline ----------------------------------------------------
def start(**kw: Any) -> c.StartWorkflow:
    return c.StartWorkflow("s1", "wf-1", name="two", definition=TWO, **kw)


@pytest.mark.parametrize(
    ("kw", "why"),
    [
        ({"sla_tier": "P9"}, "unknown SLA tier 'P9'"),
        ({"deadline": T0.replace(tzinfo=None)}, "time zone"),
        ({"deadline": T0 + timedelta(days=400)}, "more than a year"),
    ],
)
def test_a_bad_tier_or_deadline_is_refused_with_its_reason(kw: dict[str, Any], why: str) -> None:
    refused = refusal(start(**kw), T0)
    assert refused is not None and why in refused.payload.reason  # type: ignore[attr-defined]


def test_a_deadline_already_past_is_refused_by_a_client_but_started_by_the_decider() -> None:
    past = T0 - timedelta(seconds=1)
    assert "not in the future" in (sla.refusal("P0", past, T0, submitting=True) or "")
    assert refusal(start(sla_tier="P0", deadline=past), T0) is None


class SlaRecording(Recording):
    """A recorded workflow started with a tier and a deadline."""

    def __init__(self, tier: str, deadline_s: float) -> None:
        self.tier, self.deadline = tier, T0 + timedelta(seconds=deadline_s)
        super().__init__(TWO)

    def send(self, inp: c.Input) -> list[Event]:
        if isinstance(inp, c.StartWorkflow):
            inp = dataclasses.replace(inp, sla_tier=self.tier, deadline=self.deadline)
        return super().send(inp)

    def fire_at(self, kind: str, seconds: float) -> list[Event]:
        self.now = T0 + timedelta(seconds=seconds)
        return self.fire(kind)


def test_started_records_the_tier_and_arms_the_at_risk_and_deadline_timers() -> None:
    d = SlaRecording("P0", 30)
    started = d.events[0]
    assert started.payload.sla_tier == "P0"  # type: ignore[attr-defined]
    assert started.payload.deadline == T0 + timedelta(seconds=30)  # type: ignore[attr-defined]
    armed = {
        fx.timer.kind: fx.timer.due_at
        for fx in effects(d.st, d.events[:1])
        if isinstance(fx, SetTimer)
    }
    assert armed == {
        "sla_at_risk": T0 + timedelta(seconds=24),  # the last fifth of 30 s
        "sla_deadline": T0 + timedelta(seconds=30),
    }


def test_the_sla_timers_and_their_fires_pass_the_timer_service_and_the_decider_schemas() -> None:
    d = SlaRecording("P0", 30)
    timers = [fx.timer for fx in effects(d.st, d.events[:1]) if isinstance(fx, SetTimer)]
    assert {t.kind for t in timers} == set(SLA_TIMERS)
    for timer in timers:
        assert decode_timer(encode_timer(timer)) == timer
        fire = timer_input(timer)
        assert decode_input(encode_input(fire)) == fire


def test_at_risk_then_breached_are_written_when_due_and_not_before() -> None:
    d = SlaRecording("P1", 30)
    assert d.fire_at("sla_at_risk", 23.9) == []  # delivered early: nothing yet
    [risk] = d.fire_at("sla_at_risk", 24)
    assert risk.payload == WorkflowSlaAtRisk("P1", T0 + timedelta(seconds=30))
    assert d.fire_at("sla_deadline", 29) == []
    [breach] = d.fire_at("sla_deadline", 30)
    assert breach.payload == WorkflowSlaBreached("P1", T0 + timedelta(seconds=30))
    d.report("a")
    d.report("b")
    assert d.st.status == "COMPLETED"  # a breach does not end the workflow
    assert check(recorded(d), idle=False, scripts=SCRIPTS).violations == []  # I5 and the rest


def test_a_workflow_that_ends_in_time_clears_its_timers_and_breaches_nothing() -> None:
    d = SlaRecording("P0", 30)
    d.now = T0 + timedelta(seconds=5)
    d.report("a")
    ending = d.report("b")
    assert d.st.status == "COMPLETED"
    cleared = {fx.timer_id for fx in effects(d.st, ending) if isinstance(fx, ClearTimer)}
    wf = d.workflow_id
    assert {timer_id(wf, "sla_at_risk", "-"), timer_id(wf, "sla_deadline", "-")} <= cleared
    assert d.fire_at("sla_at_risk", 24) == [] and d.fire_at("sla_deadline", 30) == []
    assert check(recorded(d), idle=False, scripts=SCRIPTS).violations == []


# -- retries per tier ------------------------------------------------------------------------
ENC = {"name": "enc", "retryCount": 3, "retryDelaySeconds": 0}


def started_with(retries: int | None) -> Recording:
    class Tiered(Recording):
        def send(self, inp: c.Input) -> list[Event]:
            if isinstance(inp, c.StartWorkflow):
                inp = dataclasses.replace(inp, sla_tier="P3", sla_retries=retries)
            return super().send(inp)

    return Tiered(TWO, taskdefs=[ENC])


@pytest.mark.parametrize(("retries", "attempts"), [(None, 4), (0, 1), (1, 2), (5, 6)])
def test_a_tiers_retries_replace_the_taskdefs_retry_count(
    retries: int | None, attempts: int
) -> None:
    d = started_with(retries)
    assert d.events[0].payload.sla_retries == retries  # type: ignore[attr-defined]
    for _ in range(attempts):
        d.report("a", "FAILED", reason="boom")
    assert d.st.status == "FAILED"  # the last allowed attempt failed: the workflow with it
    assert d.latest("a").attempt == attempts
    assert check(recorded(d), idle=False, scripts=SCRIPTS).violations == []  # I5 replays it


@pytest.mark.parametrize("retries", [-1, 101, True])
def test_a_bad_tier_retry_count_is_refused_with_its_reason(retries: int) -> None:
    refused = refusal(start(sla_tier="P3", sla_retries=retries), T0)
    assert refused is not None and "SLA retries" in refused.payload.reason  # type: ignore[attr-defined]


def test_a_sub_workflow_runs_under_its_parents_sla_and_a_started_one_does_not() -> None:
    parent = workflow(
        task(
            "other",
            type_="START_WORKFLOW",
            inputParameters={"startWorkflow": {"name": "two", "version": 1}},
        ),
        task("kid", type_="SUB_WORKFLOW", subWorkflowParam={"name": "two", "version": 1}),
        name="parent",
    )
    deadline = T0 + timedelta(seconds=30)
    inp = c.StartWorkflow(
        "s1",
        "wf-p",
        name="parent",
        definition=parent,
        sla_tier="P0",
        deadline=deadline,
        sla_retries=1,
    )
    events = decide(None, inp, T0, counter_ids("t"), SCRIPTS)
    st = fold(events)
    assert st is not None
    starts = [fx for fx in effects(st, events) if isinstance(fx, StartChild)]
    assert len(starts) == 2

    def lookup(_name: str, _version: int | None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        return TWO, []

    by_kind = {fx.parent_task_id is not None: child_input(fx, lookup) for fx in starts}
    linked, free = by_kind[True], by_kind[False]
    assert isinstance(linked, c.StartWorkflow) and isinstance(free, c.StartWorkflow)
    assert (linked.sla_tier, linked.deadline, linked.sla_retries) == ("P0", deadline, 1)
    assert (free.sla_tier, free.deadline, free.sla_retries) == (None, None, None)
