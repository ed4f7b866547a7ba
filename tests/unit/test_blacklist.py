"""The blacklist rule (``es_sched.blacklist``, ADR 58): whose fault an end is, when a window
of outcomes blacklists a worker, the records it is written as, and why a queue is unplaceable."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from es_sched.blacklist import (
    HOST_FAULT,
    LEASE_EXPIRED,
    Blacklisting,
    Candidate,
    Failure,
    Lifted,
    Policy,
    Window,
    blame,
    of_record,
    unplaceable,
)
from es_sched.dispatch import config as dc
from es_sched.errors import SchemaError

pytestmark = pytest.mark.unit
T0 = datetime(2026, 12, 7, 2, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("kind", "terminal", "host_fault", "expected"),
    [
        ("task.failed", True, False, None),  # FAILED_WITH_TERMINAL_ERROR: the input's fault
        ("task.failed", True, True, None),  # terminal wins: never the worker's
        ("task.failed", False, False, None),  # an ordinary retryable failure blames no one
        ("task.failed", False, True, HOST_FAULT),
        ("lease.expired", False, False, LEASE_EXPIRED),
        ("task.completed", False, False, None),
        ("task.canceled", False, False, None),
        ("task.timed_out", False, False, None),
        ("task.completed_with_errors", False, False, None),
    ],
)
def test_only_the_workers_own_faults_are_blamed_on_it(
    kind: str, terminal: bool, host_fault: bool, expected: str | None
) -> None:
    assert blame(kind, terminal, host_fault) == expected


def _fault(i: int) -> Failure:
    return Failure(f"t{i}", "disk not writable", T0 + timedelta(seconds=i), HOST_FAULT)


def test_a_window_blacklists_past_the_ratio_once_it_holds_enough_outcomes() -> None:
    policy = Policy(window=10, min_outcomes=5, ratio=0.5, penalty_s=300)
    w = Window(policy.window)
    for i in range(4):
        w.add(_fault(i))
    assert w.verdict("w1", "media", T0, policy) is None  # 4 outcomes: too few to judge
    w.add(None)
    assert w.verdict("w1", "media", T0, policy) is not None  # 4 of 5
    w.outcomes.clear()
    for i in range(5):
        w.add(None if i % 2 else _fault(i))  # 3 of 5
    decided = w.verdict("w1", "media", T0, policy, by="dispatcher-0")
    assert decided is not None
    assert decided.until == T0 + timedelta(seconds=300)
    assert decided.why == "3 of 5 failed"
    assert [f.task_id for f in decided.failures] == ["t0", "t2", "t4"]


def test_half_is_not_over_half_and_old_outcomes_leave_the_window() -> None:
    policy = Policy(window=4, min_outcomes=4, ratio=0.5)
    w = Window(policy.window)
    for f in (_fault(0), _fault(1), None, None):
        w.add(f)
    assert w.verdict("w1", "p", T0, policy) is None  # 2 of 4 is not over half
    w.add(_fault(2))
    w.add(_fault(3))  # t0 and t1 left the window: None, None, t2, t3
    assert len(w.outcomes) == 4 and w.verdict("w1", "p", T0, policy) is None
    w.add(_fault(4))
    assert w.verdict("w1", "p", T0, policy) is not None  # 3 of 4


def test_the_record_round_trips_through_the_config_topics_parser() -> None:
    b = Blacklisting("w1", "media", T0, T0 + timedelta(minutes=5), (_fault(1),), 6, "d-0")
    change = dc.parse("blacklist:w1", dc.encode(b.as_record()))
    assert change.kind == "blacklist" and change.subject == "w1"
    assert change.value is not None and of_record("w1", change.value) == b
    lifted = Lifted("w1", T0, "alice")
    lift_change = dc.parse("blacklist:w1", dc.encode(lifted.as_record()))
    assert lift_change.value is not None and of_record("w1", lift_change.value) == lifted


def test_a_blacklisting_record_without_its_end_or_failures_is_refused() -> None:
    with pytest.raises(SchemaError, match="until"):
        dc.parse("blacklist:w1", b'{"state": "blacklisted", "at": "2026-12-07T02:00:00Z"}')
    with pytest.raises(SchemaError, match="state"):
        dc.parse("blacklist:w1", b'{"state": "benched", "at": "2026-12-07T02:00:00Z"}')


def _benched(until_min: int) -> Blacklisting:
    faults = tuple(_fault(i) for i in range(6))
    return Blacklisting("m1", "media", T0, T0 + timedelta(minutes=until_min), faults, 10)


def test_a_queue_says_why_no_worker_can_take_it() -> None:
    media = frozenset({"media.probe"})
    one = [Candidate("m1", "media", media, "alive", blacklisting=_benched(5))]
    assert unplaceable("media.probe", "media", one, T0) == (
        "blacklisted",
        "pool media: 1 worker, blacklisted until 02:05: 6 of 10 failed",
    )
    # once its penalty is over, the worker takes tasks again
    assert unplaceable("media.probe", "media", one, T0 + timedelta(minutes=6)) is None
    assert unplaceable("media.probe", "gpu", one, T0) == (
        "no_worker",
        "pool gpu: no worker serves media.probe",
    )
    two = [*one, Candidate("m2", "media", media, "dead")]
    reason, text = unplaceable("media.probe", "media", two, T0) or ("", "")
    assert reason == "mixed"
    assert text == "pool media: 2 workers: m1 blacklisted until 02:05: 6 of 10 failed; m2 dead"
    banned = [Candidate("m3", "media", media, "alive", banned=True)]
    assert unplaceable("media.probe", "media", banned, T0) == (
        "banned",
        "pool media: 1 worker, its version is banned",
    )
    healthy = [*two, Candidate("m4", "media", media, "alive")]
    assert unplaceable("media.probe", "media", healthy, T0) is None
