"""The analytics role's fold, pure (ADR 64): task events in, windowed figures out.

Two steps, each a plain function over JSON-shaped values so the faust agents that call them
(``es_sched.analytics``) only move records and keep tables:

1. ``track(facts, event, workers)``: what is remembered of one task between its events (its
   type, size class, when it was scheduled, dispatched and started, by which worker on which
   host at which version), and, when an attempt ends, its ``Outcome``. ``facts`` is None for a
   task not seen yet; the new facts are None once the task has ended (the table forgets it).
   A second end event of an attempt finds no facts and yields nothing, so a redelivered
   completion is not counted twice (at-least-once input).
2. ``add(acc, kind, outcome, sample_size)``: one window's accumulator for one stats key, and
   ``figures(acc, ...)`` the ``RunStats`` / ``FailureRate`` it proposes.

Run times and queue waits are kept as a *bottom-k sample*: the ``sample_size`` outcomes whose
hash of ``task id/attempt`` is smallest. The hash is independent of the value, so the sample
is uniform; it is deterministic (no randomness in the core, the same input gives the same
figures on every replica and replay); it is exact while a window has at most ``sample_size``
runs; and an outcome delivered again is counted once, by its hash (``add``).

Percentiles are nearest-rank: the smallest sampled value with at least q of the sample at or
below it (``percentile([1..20], 0.95) == 19``).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from es_sched.domain.events import (
    Event,
    LeaseExpired,
    TaskCanceled,
    TaskCompleted,
    TaskCompletedWithErrors,
    TaskDispatched,
    TaskFailed,
    TaskScheduled,
    TaskStarted,
    TaskTimedOut,
)
from es_sched.domain.learned import (
    CUT_BY_TIMEOUT,
    FailureRate,
    Kind,
    RunStats,
    size_class,
    timed_out_reason,
)
from es_sched.domain.pickling import frozen_by_constructor

UNKNOWN = "unknown"  # a worker whose host or version the role has not read (yet)
MAX_REASONS = 20  # distinct failure reasons kept per window; the rest count as "other"
REASON_CHARS = 60
JSON = dict[str, Any]


@dataclass(frozen=True)
class Outcome:
    """One attempt of a dispatched task that ended, as the windows count it."""

    task_id: str
    attempt: int
    task_type: str
    size_class: str
    ended_at: float  # epoch seconds: the window it falls in
    ok: bool
    run_s: float | None  # started (or dispatched) -> ended
    wait_s: float | None  # scheduled -> dispatched
    reason: str  # why it failed; "" when ok
    worker_id: str
    host: str
    version: str
    input_fault: bool = False  # a terminal failure: the input's, never counted against a worker
    # What a media worker measured against the cost model (ADR 66: its output's ``cost``):
    # measured / estimated cpu-seconds and the encoder's peak memory; None where not reported.
    cost_ratio: float | None = None
    peak_memory_mb: float | None = None

    def subject(self, kind: Kind) -> str:
        """What a stats key of ``kind`` groups this outcome by."""
        if kind == "runtime":
            return self.size_class
        if kind == "worker":
            return self.worker_id
        if kind == "host":
            return self.host
        return self.version

    def to_record(self) -> JSON:
        return {
            "task_id": self.task_id,
            "attempt": self.attempt,
            "task_type": self.task_type,
            "size_class": self.size_class,
            "ended_at": self.ended_at,
            "ok": self.ok,
            "run_s": self.run_s,
            "wait_s": self.wait_s,
            "reason": self.reason,
            "worker_id": self.worker_id,
            "host": self.host,
            "version": self.version,
            "input_fault": self.input_fault,
            "cost_ratio": self.cost_ratio,
            "peak_memory_mb": self.peak_memory_mb,
        }

    @staticmethod
    def from_record(doc: Mapping[str, Any]) -> Outcome:
        return Outcome(
            task_id=str(doc["task_id"]),
            attempt=int(doc["attempt"]),
            task_type=str(doc["task_type"]),
            size_class=str(doc["size_class"]),
            ended_at=float(doc["ended_at"]),
            ok=bool(doc["ok"]),
            run_s=None if doc.get("run_s") is None else float(doc["run_s"]),
            wait_s=None if doc.get("wait_s") is None else float(doc["wait_s"]),
            reason=str(doc.get("reason", "")),
            worker_id=str(doc.get("worker_id", UNKNOWN)),
            host=str(doc.get("host", UNKNOWN)),
            version=str(doc.get("version", UNKNOWN)),
            input_fault=bool(doc.get("input_fault", False)),
            cost_ratio=_number(doc.get("cost_ratio")),
            peak_memory_mb=_number(doc.get("peak_memory_mb")),
        )


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def measured_cost(output: Any) -> tuple[float | None, float | None]:
    """(measured / estimated cpu-seconds, peak memory MiB) from a task's output ``cost``
    block, as ``workers.media.transcode`` reports it (ADR 66); (None, None) without one."""
    cost = output.get("cost") if isinstance(output, Mapping) else None
    if not isinstance(cost, Mapping):
        return None, None
    ratio = _number(cost.get("ratio"))
    return (ratio if ratio is not None and ratio > 0 else None), _number(cost.get("peak_memory_mb"))


KINDS: tuple[Kind, ...] = ("runtime", "worker", "host", "version")


def epoch(at: datetime) -> float:
    return (at if at.tzinfo else at.replace(tzinfo=UTC)).timestamp()


def reason_class(reason: str) -> str:
    """A failure reason as a bounded key: its first clause (up to ``:``), cut short."""
    head = reason.split(":", 1)[0].strip() or "failed"
    return head[:REASON_CHARS]


def track(
    facts: Mapping[str, Any] | None,
    event: Event,
    workers: Mapping[str, tuple[str, str]],
) -> tuple[JSON | None, Outcome | None]:
    """The task's facts after ``event`` (None: forget the task) and the outcome it ended in.

    ``workers`` maps a worker id to its (host, version) as its liveness records say; they are
    copied into the facts at dispatch, so a worker that leaves later is still counted right.
    Tasks that were never dispatched (system tasks the decider runs itself) yield no outcome.
    """
    p = event.payload
    at = epoch(event.occurred_at)
    if isinstance(p, TaskScheduled):
        return {
            "type": p.task_type,
            "size": size_class(p.input, p.resources),
            "attempt": p.attempt,
            "scheduled_at": at,
        }, None
    if facts is None:
        return None, None
    if isinstance(p, TaskDispatched):
        host, version = workers.get(p.worker_id, (UNKNOWN, UNKNOWN))
        return {
            **facts,
            "attempt": p.attempt,
            "dispatched_at": at,
            "started_at": None,
            "worker": p.worker_id,
            "host": host,
            "version": version,
        }, None
    if isinstance(p, TaskStarted):
        return {**facts, "started_at": at}, None
    if isinstance(p, TaskCanceled):
        return None, None
    if isinstance(p, TaskCompleted | TaskCompletedWithErrors):
        done = _outcome(facts, event.payload, at, ok=True, reason="")
        ratio, memory = measured_cost(p.output)
        if done is not None and (ratio is not None or memory is not None):
            done = replace(done, cost_ratio=ratio, peak_memory_mb=memory)
        return None, done
    if isinstance(p, TaskFailed):
        reason = "host_fault" if p.host_fault else reason_class(p.reason)
        out = _outcome(facts, p, at, ok=False, reason=reason, input_fault=p.terminal)
        return None, out
    if isinstance(p, TaskTimedOut):
        return None, _outcome(facts, p, at, ok=False, reason=timed_out_reason(p.kind))
    if isinstance(p, LeaseExpired):
        # The attempt goes on elsewhere (the task is requeued): the worker that lost the lease
        # failed it, the task waits again from now.
        out = _outcome(facts, p, at, ok=False, reason="lease_expired")
        rest = {k: v for k, v in facts.items() if k not in ("dispatched_at", "worker")}
        return {**rest, "scheduled_at": at}, out
    return dict(facts), None


def _outcome(
    facts: Mapping[str, Any],
    payload: Any,
    at: float,
    ok: bool,
    reason: str,
    input_fault: bool = False,
) -> Outcome | None:
    dispatched = facts.get("dispatched_at")
    if dispatched is None and ok:
        return None  # never handed to a worker: a system task the decider ran itself
    started = facts.get("started_at") or dispatched
    return Outcome(
        task_id=str(payload.task_id),
        attempt=int(facts.get("attempt", 0)),
        task_type=str(facts["type"]),
        size_class=str(facts["size"]),
        ended_at=at,
        ok=ok,
        run_s=None if started is None or not ok else max(0.0, at - float(started)),
        wait_s=None if dispatched is None else max(0.0, float(dispatched) - facts["scheduled_at"]),
        reason=reason,
        worker_id=str(facts.get("worker") or UNKNOWN),
        host=str(facts.get("host") or UNKNOWN),
        version=str(facts.get("version") or UNKNOWN),
        input_fault=input_fault,
    )


def subjects(outcome: Outcome) -> list[tuple[Kind, str]]:
    """The stats keys an outcome counts in: its type and size class always; its worker, host
    and version when it was dispatched and they are known (a task that timed out in the queue
    is no worker's failure), and never for a terminal failure (FAILED_WITH_TERMINAL_ERROR says
    the input was at fault). Unlike ``es_sched.blacklist.blame``, which benches one worker for
    host faults only, an ordinary failure counts here: a version whose handler fails every
    input fails more often than the version beside it on the same inputs (issue 51 item 7)."""
    out: list[tuple[Kind, str]] = [("runtime", outcome.size_class)]
    if outcome.input_fault:
        return out
    for kind in KINDS[1:]:
        subject = outcome.subject(kind)
        if subject != UNKNOWN:
            out.append((kind, subject))
    return out


def sample_hash(task_id: str, attempt: int) -> int:
    # 48 bits: exact in any JSON reader (a double holds 53), and no two of a window's runs
    # share one in practice.
    digest = hashlib.blake2b(f"{task_id}/{attempt}".encode(), digest_size=6).digest()
    return int.from_bytes(digest, "big")


def _keep(sample: list[list[Any]], h: int, value: float, size: int) -> list[list[Any]]:
    """The bottom-``size`` sample of ``[hash, value]`` pairs (an int and a float, as JSON
    gives them back: typed ``Any`` so the compiled core never reads the hash as a float)."""
    if any(int(entry[0]) == h for entry in sample):
        return sample  # the same attempt again
    if len(sample) < size:
        return [*sample, [h, value]]
    worst = max(range(len(sample)), key=lambda i: sample[i][0])
    if h >= sample[worst][0]:
        return sample
    return [*sample[:worst], *sample[worst + 1 :], [h, value]]


def empty() -> JSON:
    return {
        "outcomes": 0,
        "failures": 0,
        "reasons": {},
        "run": [],
        "wait": [],
        "ratio": [],
        "mem": [],
        "seen": [],
    }


def add(acc: Mapping[str, Any] | None, kind: Kind, outcome: Outcome, sample_size: int) -> JSON:
    """One window's accumulator for one stats key with ``outcome`` counted in it, once: an
    outcome delivered again (the role is at least once, ADR 64: a restart may hand the windows
    agent an outcome it already folded) is recognised by its hash among the window's kept
    ones, exactly up to ``sample_size`` outcomes a window and for the bottom-k beyond."""
    base = dict(acc) if acc else empty()
    h = sample_hash(outcome.task_id, outcome.attempt)
    seen = [[x, 0.0] for x in base.get("seen", [])]
    if any(int(entry[0]) == h for entry in seen):
        return base
    base["seen"] = [entry[0] for entry in _keep(seen, h, 0.0, sample_size)]
    base["outcomes"] = int(base["outcomes"]) + 1
    if not outcome.ok:
        base["failures"] = int(base["failures"]) + 1
    if kind != "runtime":
        return base
    if not outcome.ok:
        reasons = dict(base["reasons"])
        # time-outs always keep their own count: the timeouts' censoring rule reads it
        kept = outcome.reason in reasons or outcome.reason == CUT_BY_TIMEOUT
        reason = outcome.reason if kept or len(reasons) < MAX_REASONS else "other"
        reasons[reason] = int(reasons.get(reason, 0)) + 1
        base["reasons"] = reasons
    if outcome.run_s is not None:
        base["run"] = _keep(list(base["run"]), h, outcome.run_s, sample_size)
    if outcome.wait_s is not None:
        base["wait"] = _keep(list(base["wait"]), h, outcome.wait_s, sample_size)
    if outcome.cost_ratio is not None:
        base["ratio"] = _keep(list(base.get("ratio", [])), h, outcome.cost_ratio, sample_size)
    if outcome.peak_memory_mb is not None:
        base["mem"] = _keep(list(base.get("mem", [])), h, outcome.peak_memory_mb, sample_size)
    return base


def percentile(values: list[float], q: float) -> float:
    """Nearest rank; 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def figures(
    acc: Mapping[str, Any], kind: Kind, task_type: str, subject: str, window_end: datetime
) -> RunStats | FailureRate:
    """What one window's accumulator proposes for its key."""
    outcomes, failures = int(acc["outcomes"]), int(acc["failures"])
    rate = failures / outcomes if outcomes else 0.0
    end = window_end.isoformat()
    if kind != "runtime":
        return FailureRate(kind, task_type, subject, end, outcomes, failures, rate)
    run = [float(v) for _, v in acc["run"]]
    wait = [float(v) for _, v in acc["wait"]]
    ratios = [float(v) for _, v in acc.get("ratio", [])]
    memory = [float(v) for _, v in acc.get("mem", [])]
    return RunStats(
        task_type=task_type,
        size_class=subject,
        window_end=end,
        samples=outcomes - failures,
        run_p50_s=percentile(run, 0.50),
        run_p95_s=percentile(run, 0.95),
        run_p99_s=percentile(run, 0.99),
        wait_p50_s=percentile(wait, 0.50),
        wait_p95_s=percentile(wait, 0.95),
        failures=failures,
        failure_rate=rate,
        failures_by_reason={str(k): int(v) for k, v in acc["reasons"].items()},
        # the median ratio (ADR 66: robust to one slow run), the P95 of peak memory
        cost_ratio=percentile(ratios, 0.50) if ratios else None,
        memory_p95_mb=percentile(memory, 0.95) if memory else None,
    )


def window_start(at: float, window_s: float) -> float:
    """The start of the tumbling window ``at`` falls in (windows start at multiples of it)."""
    return math.floor(at / window_s) * window_s


frozen_by_constructor(globals())  # pickled through constructors (domain.pickling, ADR 51)
