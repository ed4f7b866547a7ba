"""A workflow's attempts on one time axis: per task row, the time it waited in the queue
(scheduled -> started) and the time it ran (started -> ended, or now while it runs). Pure:
rows in, percentages out, so the template only draws boxes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any


@dataclass(frozen=True)
class Bar:
    ref: str
    attempt: int
    iteration: int
    status: str
    worker: str
    queued_left: float  # percent of the axis
    queued_width: float
    run_left: float
    run_width: float  # 0 when it never started
    seconds: float  # scheduled -> ended (or now)


def bars(rows: Sequence[Mapping[str, Any]], now: datetime) -> tuple[list[Bar], float]:
    """One bar per row in schedule order, and the axis length in seconds."""
    if not rows:
        return [], 0.0
    start: datetime = min(r["scheduled_at"] for r in rows)
    end: datetime = max(max(r.get("ended_at") or now, r["scheduled_at"]) for r in rows)
    span = max((end - start).total_seconds(), 1e-3)

    def pct(t: datetime) -> float:
        return round(100 * (t - start).total_seconds() / span, 3)

    out = []
    for r in sorted(rows, key=lambda r: (r["scheduled_at"], r.get("attempt") or 0)):
        scheduled, started, ended = r["scheduled_at"], r.get("started_at"), r.get("ended_at")
        stop = ended or now
        queued_to = started or stop
        out.append(
            Bar(
                ref=str(r["ref"]),
                attempt=int(r.get("attempt") or 0),
                iteration=int(r.get("iteration") or 0),
                status=str(r["status"]),
                worker=str(r.get("worker_id") or ""),
                queued_left=pct(scheduled),
                queued_width=max(pct(queued_to) - pct(scheduled), 0.0),
                run_left=pct(started) if started else 0.0,
                run_width=max(pct(stop) - pct(started), 0.3) if started else 0.0,
                seconds=round((stop - scheduled).total_seconds(), 3),
            )
        )
    return out, round(span, 3)
