"""Whose fault a task's end is, when a worker is blacklisted, and why a queue cannot be placed.

Pure functions and values, no I/O, no clock (ADR 58). One rule decides what counts against a
worker (``blame``); everything else (the fleet's windows, the dispatcher's metric, the API's and
the console's explanations) asks it.

- ``blame(kind, terminal, host_fault)``: the fault an end counts against its worker, or None.
  Counted: a lease the worker let expire (it crashed, froze or lost its heartbeat while
  holding the task) and a failure its handler classified as a host fault
  (``es_sched.workers.HostFault``: disk not writable, GPU driver error). Never counted: a
  terminal failure (FAILED_WITH_TERMINAL_ERROR: the input's fault), an ordinary retryable
  failure (the SDK makes every unclassified exception one, so it says nothing about the host),
  a cancel, a time-out of the task, a preemption. A success counts for the worker.
- ``Window``: a worker's last ``size`` counted outcomes; ``verdict`` says when the faults in it
  are too many (at least ``min_outcomes`` outcomes, faults over ``ratio`` of them).
- ``Blacklisting``: a decision, as the config record ``blacklist:<worker>`` carries it (the
  failures that caused it, when it ends); ``Lifted``: an operator's lift, a record too.
- ``unplaceable``: why no worker of a task type's pool can take it now, in words an operator
  reads on the queues page ("pool media: 1 worker, blacklisted until 02:05: 6 of 10 failed").
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

Fault = Literal["lease expired", "host fault"]
LEASE_EXPIRED: Fault = "lease expired"
HOST_FAULT: Fault = "host fault"
FAILED, COMPLETED, LEASE_ENDED = "task.failed", "task.completed", "lease.expired"


def blame(kind: str, terminal: bool = False, host_fault: bool = False) -> Fault | None:
    """The fault this end of a task counts against the worker that held it; None if none.

    ``kind``: ``task.failed``, ``task.completed`` (None: a success) or ``lease.expired`` (the
    dispatcher took a lease back because the worker stopped heartbeating it). A terminal
    failure is the input's, even when its handler also called it a host fault."""
    if kind == LEASE_ENDED:
        return LEASE_EXPIRED
    if kind == FAILED and host_fault and not terminal:
        return HOST_FAULT
    return None


@dataclass(frozen=True)
class Failure:
    """One outcome held against a worker: which task, why, when."""

    task_id: str
    reason: str
    at: datetime
    fault: str

    def as_record(self) -> dict[str, str]:
        return {
            "task_id": self.task_id,
            "reason": self.reason,
            "at": self.at.isoformat(),
            "fault": self.fault,
        }


@dataclass(frozen=True)
class Policy:
    """``ES_SCHED_DISPATCH_BLACKLIST_*``: the window, the threshold and the penalty."""

    window: int = 10
    min_outcomes: int = 5
    ratio: float = 0.5
    penalty_s: float = 300.0


@dataclass(frozen=True)
class Blacklisting:
    """A worker gets no new task until ``until``, because of ``failures`` (of ``outcomes``)."""

    worker_id: str
    pool: str
    at: datetime
    until: datetime
    failures: tuple[Failure, ...]
    outcomes: int
    by: str = ""

    def active(self, now: datetime) -> bool:
        return now < self.until

    @property
    def why(self) -> str:
        return f"{len(self.failures)} of {self.outcomes} failed"

    def as_record(self) -> dict[str, Any]:
        return {
            "state": "blacklisted",
            "pool": self.pool,
            "at": self.at.isoformat(),
            "until": self.until.isoformat(),
            "outcomes": self.outcomes,
            "failures": [f.as_record() for f in self.failures],
            "by": self.by,
        }


@dataclass(frozen=True)
class Lifted:
    """An operator lifted the worker's blacklisting before it ended."""

    worker_id: str
    at: datetime
    by: str

    def as_record(self) -> dict[str, Any]:
        return {"state": "lifted", "at": self.at.isoformat(), "by": self.by}


def of_record(worker_id: str, value: Mapping[str, Any]) -> Blacklisting | Lifted:
    """A ``blacklist:<worker>`` config value (schema-checked already) as its object."""
    at = datetime.fromisoformat(value["at"])
    if value["state"] == "lifted":
        return Lifted(worker_id, at, str(value.get("by", "")))
    failures = tuple(
        Failure(f["task_id"], f["reason"], datetime.fromisoformat(f["at"]), f["fault"])
        for f in value.get("failures", ())
    )
    return Blacklisting(
        worker_id,
        str(value.get("pool", "")),
        at,
        datetime.fromisoformat(value["until"]),
        failures,
        int(value.get("outcomes", len(failures))),
        str(value.get("by", "")),
    )


@dataclass
class Window:
    """A worker's last counted outcomes: a ``Failure`` or None (a success)."""

    size: int
    outcomes: deque[Failure | None] = field(default_factory=deque)

    def add(self, failure: Failure | None) -> None:
        self.outcomes.append(failure)
        while len(self.outcomes) > self.size:
            self.outcomes.popleft()

    def failures(self) -> tuple[Failure, ...]:
        return tuple(f for f in self.outcomes if f is not None)

    def verdict(
        self, worker_id: str, pool: str, now: datetime, policy: Policy, by: str = ""
    ) -> Blacklisting | None:
        """A blacklisting when this window's faults are too many, else None."""
        failures, n = self.failures(), len(self.outcomes)
        if n < policy.min_outcomes or not failures or len(failures) / n <= policy.ratio:
            return None
        until = now + timedelta(seconds=policy.penalty_s)
        return Blacklisting(worker_id, pool, now, until, failures, n, by)


@dataclass(frozen=True)
class Candidate:
    """A worker as ``unplaceable`` sees it: what can keep it from taking a task now."""

    worker_id: str
    pool: str
    types: frozenset[str]
    health: str  # alive | suspect | dead | unknown
    banned: bool = False
    blacklisting: Blacklisting | None = None
    # task type -> why its version may take none of that type's tasks (``es_sched.versions``)
    stopped: tuple[tuple[str, str], ...] = ()


def _clock(t: datetime) -> str:
    return t.strftime("%H:%M")


def unplaceable(
    task_type: str, pool: str, workers: Iterable[Candidate], now: datetime
) -> tuple[str, str] | None:
    """Why no worker can take a task of ``task_type`` (pool ``pool``) now: a short reason for
    a metric's label and a sentence for an operator; None when some worker can.

    Reasons: ``no_worker`` (none of the pool serves the type), ``blacklisted``, ``banned``,
    ``version_stopped`` (ADR 70), ``not_alive``, or ``mixed`` (each worker for its own
    reason)."""
    serving = sorted(
        (w for w in workers if w.pool == pool and task_type in w.types), key=lambda w: w.worker_id
    )
    if not serving:
        return "no_worker", f"pool {pool}: no worker serves {task_type}"
    causes: list[tuple[str, str]] = []
    for w in serving:
        b = w.blacklisting
        if b is not None and b.active(now):
            causes.append(("blacklisted", f"blacklisted until {_clock(b.until)}: {b.why}"))
        elif w.banned:
            causes.append(("banned", "its version is banned"))
        elif task_type in dict(w.stopped):
            causes.append(("version_stopped", dict(w.stopped)[task_type]))
        elif w.health != "alive":
            causes.append(("not_alive", w.health))
        else:
            return None
    n = len(serving)
    head = f"pool {pool}: {n} worker{'s' if n > 1 else ''}"
    reasons = {reason for reason, _ in causes}
    reason = reasons.pop() if len(reasons) == 1 else "mixed"
    if n == 1:
        return reason, f"{head}, {causes[0][1]}"
    detail = "; ".join(
        f"{w.worker_id} {text}" for w, (_, text) in zip(serving, causes, strict=True)
    )
    return reason, f"{head}: {detail}"
