"""Worker versions by failure rate (``es_sched.versions``, ADR 70): share routing, the rules that
stop a version, a rollout's promotion and stop, the records they are written as, and how the
dispatcher's core and the unplaceable rule apply them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from es_sched.blacklist import Candidate, unplaceable
from es_sched.dispatch import config as dc
from es_sched.dispatch.core.engine import Assignment, DispatchCore
from es_sched.dispatch.core.placement import Fleet, WorkerView
from es_sched.dispatch.core.queues import ReadyTask
from es_sched.domain.learned import FailureRate, parse, to_record
from es_sched.errors import SchemaError
from es_sched.versions import (
    Rollout,
    Rule,
    Stop,
    Versions,
    rollout_of_record,
    routes_to_candidate,
    stop_of_record,
)

pytestmark = pytest.mark.unit
T0 = datetime(2026, 12, 7, 2, 0, tzinfo=UTC)
TYPE = "media.transcode"


def rate(
    version: str, outcomes: int, failures: int, end: datetime = T0 + timedelta(minutes=5)
) -> FailureRate:
    return FailureRate(
        "version", TYPE, version, end.isoformat(), outcomes, failures, failures / outcomes
    )


def rollout(**changes: object) -> Rollout:
    base: dict[str, object] = {
        "task_type": TYPE,
        "candidate": "2.0.0",
        "current": "1.0.0",
        "share": 0.2,
        "margin": 0.05,
        "min_samples": 20,
        "state": "rolling",
        "at": T0,
        "by": "alice",
    }
    return Rollout(**{**base, **changes})  # type: ignore[arg-type]


# -- share routing ---------------------------------------------------------------------------


@pytest.mark.parametrize("share", [0.05, 0.2, 0.5, 0.9])
def test_share_routing_honours_the_share_within_tolerance(share: float) -> None:
    ids = [f"task-{i}" for i in range(20_000)]
    given = sum(routes_to_candidate(t, share) for t in ids) / len(ids)
    assert abs(given - share) < 0.015, given


def test_share_routing_is_deterministic_and_nested() -> None:
    ids = [f"wf-{i}/t" for i in range(2_000)]
    assert [routes_to_candidate(t, 0.2) for t in ids] == [routes_to_candidate(t, 0.2) for t in ids]
    # a task given to the candidate at 20% stays the candidate's when the share grows
    at20 = {t for t in ids if routes_to_candidate(t, 0.2)}
    at50 = {t for t in ids if routes_to_candidate(t, 0.5)}
    assert at20 < at50
    assert not any(routes_to_candidate(t, 0.0) for t in ids)
    assert all(routes_to_candidate(t, 1.0) for t in ids)


def test_a_rolling_rollout_admits_each_task_on_exactly_one_side() -> None:
    r = rollout()
    for i in range(500):
        task_id = f"t{i}"
        on_candidate = r.admits("2.0.0", task_id)
        assert on_candidate == routes_to_candidate(task_id, 0.2)
        assert r.admits("1.0.0", task_id) is not on_candidate
        assert r.admits("0.9.0", task_id) is not on_candidate  # any other version: current side


# -- rollout judging ---------------------------------------------------------------------------


def test_a_candidate_failing_over_current_plus_margin_is_stopped_with_its_figures() -> None:
    later = T0 + timedelta(minutes=6)
    decided = rollout().judge(rate("2.0.0", 20, 12), rate("1.0.0", 80, 4), later, "dispatcher-0")
    assert decided is not None and decided.state == "stopped" and decided.given == 0.0
    assert decided.by == "dispatcher-0" and decided.at == later
    assert decided.seen_candidate is not None and decided.seen_candidate.failure_rate == 0.6
    assert decided.seen_current is not None and decided.seen_current.outcomes == 80
    assert not decided.admits("2.0.0", "any") and decided.admits("1.0.0", "any")
    assert decided.why == (
        "2.0.0: 12 of 20 failed (60%) against 1.0.0: 4 of 80 failed (5%), margin 5%"
    )


def test_a_candidate_within_the_margin_is_promoted_to_every_task() -> None:
    # 2 of 20 (10%) against 4 of 80 (5%): within 5% more, promoted
    decided = rollout().judge(rate("2.0.0", 20, 2), rate("1.0.0", 80, 4), T0, "d")
    assert decided is not None and decided.state == "promoted" and decided.given == 1.0
    assert all(decided.admits("2.0.0", f"t{i}") for i in range(100))
    assert not any(decided.admits("1.0.0", f"t{i}") for i in range(100))
    worse = rollout().judge(rate("2.0.0", 20, 3), rate("1.0.0", 80, 4), T0, "d")
    assert worse is not None and worse.state == "stopped"  # 15% > 5% + 5%


@pytest.mark.parametrize(
    ("candidate", "current"),
    [(19, 80), (20, 19)],  # either version short of min_samples: no decision
)
def test_no_decision_before_both_versions_have_min_samples(candidate: int, current: int) -> None:
    r = rollout()
    assert r.judge(rate("2.0.0", candidate, candidate), rate("1.0.0", current, 0), T0, "d") is None
    assert r.judge(None, rate("1.0.0", 80, 0), T0, "d") is None


def test_only_windows_ending_after_the_rollout_began_judge_it() -> None:
    r = rollout(at=T0 + timedelta(hours=1))
    assert r.judge(rate("2.0.0", 50, 50), rate("1.0.0", 80, 0), T0, "d") is None
    late = T0 + timedelta(hours=2)
    assert r.judge(rate("2.0.0", 50, 50, late), rate("1.0.0", 80, 0, late), T0, "d") is not None


def test_a_decided_rollout_is_not_judged_again_and_a_revert_rolls_it_again() -> None:
    stopped = rollout().judge(rate("2.0.0", 20, 20), rate("1.0.0", 80, 0), T0, "d")
    assert stopped is not None
    assert stopped.judge(rate("2.0.0", 20, 0), rate("1.0.0", 80, 0), T0, "d") is None
    back = stopped.revert(T0 + timedelta(hours=1), "bob")
    assert (back.state, back.share, back.reverted, back.by) == ("rolling", 0.2, "stopped", "bob")
    assert back.seen_candidate is None
    # the figures that stopped it are older than the revert: no new decision from them
    assert back.judge(rate("2.0.0", 20, 20), rate("1.0.0", 80, 0), T0, "d") is None
    with pytest.raises(ValueError, match="not decided"):
        back.revert(T0, "bob")


def test_rollout_records_round_trip_and_pass_the_config_schema() -> None:
    stopped = rollout().judge(rate("2.0.0", 20, 12), rate("1.0.0", 80, 4), T0, "dispatcher-0")
    assert stopped is not None
    for r in (rollout(), stopped, stopped.revert(T0, "bob")):
        record = r.as_record()
        change = dc.parse(f"rollout:{TYPE}", dc.encode(record))
        assert change.kind == "rollout" and change.subject == TYPE
        assert rollout_of_record(TYPE, record) == r
    assert stopped.as_record()["seen"]["candidate"]["failures"] == 12
    with pytest.raises(SchemaError, match="same"):
        dc.parse(f"rollout:{TYPE}", dc.encode({**rollout().as_record(), "current": "2.0.0"}))
    with pytest.raises(SchemaError):
        dc.parse(f"rollout:{TYPE}", dc.encode({**rollout().as_record(), "share": 1.5}))
    with pytest.raises(SchemaError, match="ISO-8601"):
        dc.parse(f"rollout:{TYPE}", dc.encode({**rollout().as_record(), "at": "yesterday"}))


# -- rules ---------------------------------------------------------------------------------------


def test_a_rule_stops_a_version_over_its_threshold_after_min_samples() -> None:
    v = Versions(rules={TYPE: Rule(TYPE, 0.5, 10)})
    assert v.decide([rate("1.0.0", 9, 9), rate("1.1.0", 10, 5)], T0, "d") == []
    (stop,) = v.decide([rate("1.1.0", 10, 6)], T0, "d")
    assert isinstance(stop, Stop) and (stop.task_type, stop.version) == (TYPE, "1.1.0")
    assert stop.why == "6 of 10 failed (60%), over 50%"
    v.apply(stop)
    assert v.decide([rate("1.1.0", 10, 6)], T0, "d") == []  # in force: nothing new
    assert not v.admits(TYPE, "1.1.0", "t1") and v.admits("other", "1.1.0", "t1")
    assert v.why_not(TYPE, "1.1.0") == f"version 1.1.0 stopped for {TYPE}: {stop.why}"


def test_a_malformed_proposal_is_refused_at_the_boundary_not_fatal() -> None:
    record = {**to_record(rate("1.1.0", 10, 6)), "outcomes": "many"}
    with pytest.raises(ValueError, match="outcomes is not a number"):
        parse(record)  # the stats view skips it with a warning
    v = Versions(rules={TYPE: Rule(TYPE, 0.5, 10)})
    nonsense = FailureRate("version", TYPE, "1.1.0", T0.isoformat(), 10, 16, 1.6)
    assert v.decide([nonsense], T0, "d") == []


def test_a_rule_for_any_type_and_a_lift_that_only_a_later_window_overrides() -> None:
    v = Versions(rules={"*": Rule("*", 0.2, 5)})
    (stop,) = v.decide([rate("3.0.0", 5, 2)], T0, "d")
    assert isinstance(stop, Stop)
    v.apply(stop.lifted(T0 + timedelta(minutes=10), "bob"))
    assert v.admits(TYPE, "3.0.0", "t1")
    assert v.decide([rate("3.0.0", 5, 2)], T0, "d") == []  # the window ended before the lift
    again = v.decide([rate("3.0.0", 5, 2, T0 + timedelta(minutes=11))], T0, "d")
    assert [type(d) for d in again] == [Stop]


def test_stop_records_round_trip_and_pass_the_config_schema() -> None:
    v = Versions(rules={TYPE: Rule(TYPE, 0.5, 10)})
    (stop,) = v.decide([rate("1.1.0", 10, 6)], T0, "dispatcher-1")
    assert isinstance(stop, Stop)
    for s in (stop, stop.lifted(T0, "bob")):
        key = f"version-stop:{TYPE}|1.1.0"
        assert dc.parse(key, dc.encode(s.as_record())).subject == f"{TYPE}|1.1.0"
        assert stop_of_record(f"{TYPE}|1.1.0", s.as_record()) == s
    with pytest.raises(SchemaError, match="<task type>"):
        dc.parse("version-stop:nobar", dc.encode(stop.as_record()))
    with pytest.raises(SchemaError):
        dc.parse(f"version-rule:{TYPE}", dc.encode({"max_failure_rate": 2, "min_samples": 1}))


# -- the dispatcher's core and the unplaceable rule ------------------------------------------------


def worker(worker_id: str, version: str) -> WorkerView:
    return WorkerView(worker_id, "default", version, frozenset({TYPE}), 4.0, 4096, last_seen=T0)


def task(task_id: str) -> ReadyTask:
    return ReadyTask(task_id, f"wf-{task_id}", TYPE, 5, T0, T0)


def core_with_config(*records: tuple[str, dict[str, object]]) -> DispatchCore:
    core = DispatchCore(fleet=Fleet())
    for w in (worker("old", "1.0.0"), worker("new", "2.0.0")):
        core.fleet.upsert(w)
    for key, value in records:
        dc.apply(core, dc.parse(key, dc.encode(value)))
    return core


def placed(core: DispatchCore, ids: list[str]) -> dict[str, str]:
    for t in ids:
        core.enqueue(task(t))
    out: dict[str, str] = {}
    for d in core.dispatch(T0, lambda: "tok"):
        assert isinstance(d, Assignment)
        out[d.task.task_id] = d.placement.worker_id
        core.finished(d.task.task_id)
    return out


def test_the_core_places_each_task_on_its_side_of_a_rollout() -> None:
    core = core_with_config((f"rollout:{TYPE}", rollout().as_record()))
    ids = [f"t{i}" for i in range(40)]
    got = placed(core, ids)
    assert len(got) == 40
    assert got == {t: "new" if routes_to_candidate(t, 0.2) else "old" for t in ids}


def test_a_type_whose_versions_are_all_stopped_is_held_and_unplaceable() -> None:
    promoted = rollout().judge(rate("2.0.0", 20, 0), rate("1.0.0", 80, 0), T0, "d")
    assert promoted is not None
    stop = Stop(TYPE, "2.0.0", "stopped", T0, "d")
    core = core_with_config(
        (f"rollout:{TYPE}", promoted.as_record()),
        (f"version-stop:{TYPE}|2.0.0", stop.as_record()),
    )
    held = core.fleet.version_held("default", TYPE, T0)
    assert (
        held == f"version 1.0.0 replaced by 2.0.0; version 2.0.0 stopped for {TYPE}: stopped by d"
    )
    assert placed(core, ["a", "b"]) == {}
    candidates = [
        Candidate(
            w.worker_id,
            w.pool,
            w.types,
            "alive",
            stopped=core.fleet.versions.held_types(w.types, w.version),
        )
        for w in core.fleet.workers.values()
    ]
    found = unplaceable(TYPE, "default", candidates, T0)
    assert found is not None and found[0] == "version_stopped"
    # the operator lifts the stop (a record): the held tasks go to the promoted version
    dc.apply(
        core, dc.parse(f"version-stop:{TYPE}|2.0.0", dc.encode(stop.lifted(T0, "bob").as_record()))
    )
    assert core.fleet.version_held("default", TYPE, T0) is None
    got = [
        d.placement.worker_id for d in core.dispatch(T0, lambda: "tok") if isinstance(d, Assignment)
    ]
    assert got == ["new", "new"]
