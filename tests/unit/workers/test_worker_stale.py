"""A worker never starts an assignment whose lease has ended (``es_sched.workers.stale``): one
whose cancel it read, or whose lease ran out while it was not heartbeating."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from es_sched.domain import commands as c
from es_sched.serialization import wire
from es_sched.workers import reports, stale
from es_sched.workers.stale import Stale, StaleLeases

T0 = datetime(2026, 5, 1, 9, 0, tzinfo=UTC)
H = 1.0


class Clocks:
    """Wall and monotonic time moving together, as on a host that is never suspended."""

    def __init__(self) -> None:
        self.s = 0.0

    def wall(self) -> datetime:
        return T0 + timedelta(seconds=self.s)

    def monotonic(self) -> float:
        return self.s


def assignment(task_id: str = "t1", epoch: int = 1, expires_s: float = 3.0) -> wire.Assignment:
    return wire.Assignment(
        worker_id="w",
        workflow_id="wf",
        task_id=task_id,
        task_type="encode",
        attempt=1,
        lease_epoch=epoch,
        lease_token="tok",
        lease_expires_at=(T0 + timedelta(seconds=expires_s)).isoformat(),
        input={},
    )


def beating(clocks: Clocks, until_s: float) -> StaleLeases:
    leases = StaleLeases(H, clocks.wall, clocks.monotonic)
    while clocks.s <= until_s:
        leases.beat()
        clocks.s += H
    clocks.s -= H
    return leases


def test_a_cancelled_epoch_and_every_older_one_never_start() -> None:
    leases = beating(Clocks(), 0)
    leases.cancelled("t1", 3)
    leases.cancelled("t1", 2)  # an older cancel read later changes nothing
    assert leases.why_not(assignment(epoch=2)) == Stale("cancelled before it started", True)
    assert leases.why_not(assignment(epoch=3)) == Stale("cancelled before it started", True)
    assert leases.why_not(assignment(epoch=4)) is None
    assert leases.why_not(assignment("t2", epoch=1)) is None


def test_cancels_are_remembered_for_the_newest_tasks_only() -> None:
    leases = beating(Clocks(), 0)
    for i in range(stale.REMEMBER + 1):
        leases.cancelled(f"t{i}", 1)
    assert leases.why_not(assignment("t0")) is None  # the oldest was forgotten
    assert leases.why_not(assignment(f"t{stale.REMEMBER}")) is not None


def test_heartbeats_keep_a_lease_live_past_its_first_expiry() -> None:
    """The dispatcher extends every lease of a worker at each heartbeat, so an assignment
    waiting for a slot on a heartbeating worker is still leased after its first expiry."""
    clocks = Clocks()
    leases = beating(clocks, 30)
    assert leases.why_not(assignment(expires_s=3)) is None


def test_a_lease_that_ran_out_while_the_worker_was_frozen_never_starts() -> None:
    clocks = Clocks()
    leases = beating(clocks, 5)  # heartbeats at 0..5, then frozen (SIGSTOP) until 20
    clocks.s = 20.0
    assert leases.heartbeating_since == clocks.wall()  # woke up: not heartbeating yet
    why = leases.why_not(assignment(expires_s=8))
    assert why is not None and "while this worker was not heartbeating" in why.reason
    assert not why.cancelled  # the dispatcher may not have ended it: given back, not confirmed
    assert leases.why_not(assignment(expires_s=25)) is None
    leases.beat()  # the first heartbeat after the gap starts a new run
    clocks.s = 21.0
    leases.beat()
    assert leases.heartbeating_since == T0 + timedelta(seconds=20)
    assert leases.why_not(assignment(expires_s=19.5)) is not None
    assert leases.why_not(assignment(expires_s=20.5)) is None


def test_a_short_stall_is_not_a_gap() -> None:
    clocks = Clocks()
    leases = beating(clocks, 5)
    clocks.s += stale.GAP_HEARTBEATS * H - 0.1  # under the shortest lease
    leases.beat()
    assert leases.heartbeating_since == T0
    assert leases.why_not(assignment(expires_s=6)) is None


def test_a_stale_lease_is_reported_cancelled_after_a_cancel_and_given_back_after_a_gap() -> None:
    """A cancelled report is an audit record (the decider changes nothing); a task skipped
    only because its time ran out while the worker was silent may still hold a live lease at
    the dispatcher, so it is declined: the decider ends that lease (if still live) and the
    task is queued again. Reporting it cancelled left it waiting forever."""
    a = assignment(expires_s=8)
    after_cancel = reports.not_started(a, "w", Stale("cancelled before it started", True))
    after_gap = reports.not_started(a, "w", Stale("lease expired ... not heartbeating", False))
    assert isinstance(after_cancel, c.ReportCancelled)
    assert isinstance(after_gap, c.ReportDeclined)
    assert (after_gap.task_id, after_gap.lease_epoch) == (a.task_id, a.lease_epoch)
