"""What the analytics role learns, as the roles that use it read it (ADR 64).

The analytics role (``es_sched.analytics``) folds the events topic into windowed statistics
and publishes them on the compacted ``<prefix>.stats`` topic, one record per key. They are
proposals: the decider and the dispatcher read the latest one when they decide, and whatever
they use is recorded in the event they write (``task.scheduled`` carries the timeout it used),
so replay and the audit never read this topic, and losing or repeating a record changes no
decision already made.

A *size class* groups the tasks of one type whose run times are alike. For media tasks it is
the output height class, the source duration bucket and the codec, the three things the
transcode's cost grows with (``workers.media.cost``); any other task is in the class ``any``.
Every role computes it with ``size_class`` so that the analytics role's keys and the
readers' lookups agree.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from es_sched.domain.pickling import frozen_by_constructor

HEIGHT_CLASSES = (360, 480, 720, 1080, 1440, 2160)  # a height goes to the first class >= it
DURATION_BUCKETS_S = (10, 60, 300, 1800)  # seconds of source: <=10, <=60, <=300, <=1800, more
ANY = "any"

Kind = Literal["runtime", "worker", "host", "version"]


def timed_out_reason(kind: str) -> str:
    """The failure reason a time-out of ``kind`` (total, response) counts under."""
    return f"timed_out_{kind}"


# A run cut by its total timeout: how long it would have run is unknown, only that it ran at
# least that long (a censored sample). ``RunStats.failures_by_reason`` counts them under this
# reason, and ``timeouts.chosen`` will not read a percentile that they may hide.
CUT_BY_TIMEOUT = timed_out_reason("total")


def _height_class(height: Any) -> int | None:
    if isinstance(height, bool) or not isinstance(height, int | float) or height <= 0:
        return None
    return next((h for h in HEIGHT_CLASSES if height <= h), HEIGHT_CLASSES[-1])


def _duration_bucket(duration_s: Any) -> str:
    if isinstance(duration_s, bool) or not isinstance(duration_s, int | float):
        return "d?"
    for bound in DURATION_BUCKETS_S:
        if duration_s <= bound:
            return f"d{bound}"
    return f"d{DURATION_BUCKETS_S[-1]}+"


def size_class(task_input: Mapping[str, Any], resources: Mapping[str, Any] | None = None) -> str:
    """``h720-d60-h264`` for a media task (height and codec from its input, the source's
    duration from the estimate its resources came from), ``any`` for everything else."""
    height = _height_class(task_input.get("height"))
    codec = task_input.get("codec")
    if height is None or not isinstance(codec, str):
        return ANY
    estimate = (resources or {}).get("inputs")
    duration = estimate.get("duration_s") if isinstance(estimate, Mapping) else None
    if duration is None:
        duration = task_input.get("duration_s")
    return f"h{height}-{_duration_bucket(duration)}-{codec}"


def stats_key(kind: Kind, task_type: str, subject: str) -> str:
    """The stats topic's key: ``runtime|transcode|h720-d60-h264``, ``version|transcode|1.4.0``."""
    return f"{kind}|{task_type}|{subject}"


@dataclass(frozen=True)
class RunStats:
    """One task type and size class over the last window (kind ``runtime``)."""

    task_type: str
    size_class: str
    window_end: str  # ISO-8601, the end of the window these figures cover
    samples: int  # completed runs in the window
    run_p50_s: float
    run_p95_s: float
    run_p99_s: float
    wait_p50_s: float  # queue wait: scheduled -> dispatched
    wait_p95_s: float
    failures: int  # failed runs in the window (any reason)
    failure_rate: float  # failures / (samples + failures)
    failures_by_reason: dict[str, int] = field(default_factory=dict)
    # measured cpu-seconds / the cost model's estimate (media tasks whose resources carry
    # one); None where nothing was estimated
    cost_ratio: float | None = None
    memory_p95_mb: float | None = None  # peak resident memory reported by the worker

    @property
    def key(self) -> str:
        return stats_key("runtime", self.task_type, self.size_class)


@dataclass(frozen=True)
class FailureRate:
    """Failure rate of one worker, host or worker version for one task type (kinds
    ``worker``, ``host``, ``version``) over the last window."""

    kind: Kind
    task_type: str
    subject: str  # the worker id, host name or worker version
    window_end: str
    outcomes: int  # runs that ended, any way
    failures: int  # of which failed (terminal or not; time-outs and lease expiries count)
    failure_rate: float

    @property
    def key(self) -> str:
        return stats_key(self.kind, self.task_type, self.subject)


_NUMBERS = {
    "samples": int,
    "outcomes": int,
    "failures": int,
    **{f: float for f in ("run_p50_s", "run_p95_s", "run_p99_s", "wait_p50_s", "wait_p95_s")},
    **{f: float for f in ("failure_rate", "cost_ratio", "memory_p95_mb")},
}


_OPTIONAL = ("cost_ratio", "memory_p95_mb")


def _checked(fields: dict[str, Any]) -> dict[str, Any]:
    """The record's fields with their types checked: a proposal is advice from another
    process, and one whose figures are not numbers is refused here, at the boundary, the same
    way by the Python and the compiled core (whose dataclasses check types themselves)."""
    for name, value in fields.items():
        kind = _NUMBERS.get(name)
        if kind is None or (value is None and name in _OPTIONAL):
            continue
        numeric = isinstance(value, int | float) and not isinstance(value, bool)
        if not numeric or (kind is int and not isinstance(value, int)):
            raise ValueError(f"stats field {name} is not a number: {value!r}")
        if kind is float:
            fields[name] = float(value)
    for name in ("task_type", "size_class", "subject", "window_end"):
        if name in fields and not isinstance(fields[name], str):
            raise ValueError(f"stats field {name} is not a string: {fields[name]!r}")
    return fields


def parse(record: Mapping[str, Any]) -> RunStats | FailureRate | None:
    """A stats record as a value (None: a kind this version does not know, ignored).

    Raises ValueError or TypeError for a record of a known kind that is not well formed."""
    kind = record.get("kind")
    fields = _checked({k: v for k, v in record.items() if k != "kind"})
    if kind == "runtime":
        return RunStats(**fields)
    if kind in ("worker", "host", "version"):
        return FailureRate(kind=kind, **fields)
    return None


def to_record(stats: RunStats | FailureRate) -> dict[str, Any]:
    out = asdict(stats)
    if isinstance(stats, RunStats):
        out["kind"] = "runtime"
    return out


frozen_by_constructor(globals())  # pickled through constructors (domain.pickling, ADR 51)
