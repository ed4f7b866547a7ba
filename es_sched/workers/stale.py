"""What a worker must never start: an assignment whose lease has already ended.

The dispatcher ends a lease with a ``cancel`` record on the worker's partition (cancel,
terminate, timeouts, lease expiry, preemption), written after the assignment it ends. A worker
frozen past its lease (SIGSTOP, a long pause, a saturated host) wakes up to both; reading one
record and starting it would run stale epochs whose cancel is the very next record (issue 12).
Three rules close that, all checked again just before a start:

1. The SDK reads its partition up to its end, as the broker has it at that moment, before
   starting anything (``AssignmentReader.catch_up``), so a cancel already written is read first.
2. ``StaleLeases`` remembers the newest cancelled epoch of each task (the last ``REMEMBER``
   tasks), so an assignment of that epoch or an older one is never started, even when it is
   read after its cancel.
3. An assignment whose ``lease_expires_at`` passed while this worker was not heartbeating is
   not started: the dispatcher extends every lease of a worker at each of its heartbeats, so
   a lease can only run out across a gap in them. A gap is ``GAP_HEARTBEATS`` heartbeats
   without one (the shortest lease, 3 heartbeats); the run of heartbeats without a gap began
   at ``heartbeating_since``, and a lease that expired before then may be over. *May*: the
   dispatcher may not have expired it (a late heartbeat still reached it, or its own expiry
   runs late), so such a task is given back (``worker.task_declined``, fenced by its epoch),
   not reported cancelled: a cancelled report is only an audit record, and a task skipped that
   way while its lease lived would wait forever (bench/api_workers.py met it: a fork's tasks
   behind a gateway starved for CPU past its gap).

Clock assumption: ``lease_expires_at`` is the dispatcher's clock and rule 3 compares it with
this worker's UTC wall clock, so the two hosts must agree to well within a lease (3 to 6
heartbeats; NTP keeps hosts within milliseconds). A worker clock running ahead by more than
that would skip assignments whose lease is still live; one running behind only weakens rule 3,
never rules 1 and 2. Gaps are measured on the monotonic clock, which keeps counting while the
process is stopped.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from datetime import UTC, datetime
from typing import NamedTuple

from es_sched.serialization import wire
from es_sched.serialization.codec import parse_time

REMEMBER = 10_000  # tasks whose last cancelled epoch is kept
GAP_HEARTBEATS = 3.0


class Stale(NamedTuple):
    """Why an assignment must not start. ``cancelled``: a cancel record ended its lease (rule
    2), so no lease is live and the worker's word is an audit record; else only its time ran out
    while this worker was silent (rule 3), which the dispatcher may not have acted on (a
    heartbeat of ours reached it in time, or its expiry runs late), so the worker must give
    the lease back itself (``reports.not_started``)."""

    reason: str
    cancelled: bool


def _utcnow() -> datetime:
    return datetime.now(UTC)


class StaleLeases:
    def __init__(
        self,
        heartbeat_s: float,
        wall: Callable[[], datetime] = _utcnow,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.gap_s = GAP_HEARTBEATS * heartbeat_s
        self._wall, self._monotonic = wall, monotonic
        self._cancelled: OrderedDict[str, int] = OrderedDict()  # task id -> newest epoch
        self._last_beat: float | None = None
        self._since = wall()

    def cancelled(self, task_id: str, epoch: int) -> None:
        """A cancel record was read: that epoch of the task and every older one are over."""
        newest = max(epoch, self._cancelled.pop(task_id, 0))
        self._cancelled[task_id] = newest
        while len(self._cancelled) > REMEMBER:
            self._cancelled.popitem(last=False)

    def beat(self) -> None:
        """A heartbeat was sent now."""
        if not self._beating():
            self._since = self._wall()
        self._last_beat = self._monotonic()

    def _beating(self) -> bool:
        return self._last_beat is not None and self._monotonic() - self._last_beat < self.gap_s

    @property
    def heartbeating_since(self) -> datetime:
        """Start of the current run of heartbeats without a gap; now when none is running
        (a worker that just woke up has not been heartbeating)."""
        return self._since if self._beating() else self._wall()

    def why_not(self, a: wire.Assignment) -> Stale | None:
        """Why ``a`` must not start, or None when its lease may be live."""
        if self._cancelled.get(a.task_id, 0) >= a.lease_epoch:
            return Stale("cancelled before it started", cancelled=True)
        expires = parse_time(a.lease_expires_at, "assignment.lease_expires_at")
        if expires <= self.heartbeating_since:
            why = f"lease expired at {a.lease_expires_at} while this worker was not heartbeating"
            return Stale(why, cancelled=False)
        return None
