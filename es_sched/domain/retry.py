"""Retry delays, retry input changes and wait durations: pure arithmetic on the attempt number.

A retry decision needs only the attempt count (never old attempts' data). Jitter is derived
from a hash of the task id and attempt, so it is spread across tasks yet replays identically.

``retryInputChanges`` (ADR 71) is a list of objects; attempt N+1 runs with the first N merged
over the input its expressions resolve to, in order, key by key at the top level (attempt 2:
the first, attempt 3: the first and the second, ...; past the list's end, all of them). So a
media transcode can ask for ``[{"preset": "veryfast"}, {"codec": "h264"}]``: the second
attempt is faster, the third is also H.264. The values are literal JSON, never expressions:
the input they change is already resolved. The decider merges them when it schedules the
attempt, so ``task.scheduled`` carries the input used and replay reproduces it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from es_sched.domain.definitions import TaskSettings
from es_sched.domain.ids import unit_fraction


def retry_delay(settings: TaskSettings, attempt: int, key: str) -> float:
    """Seconds to wait before attempt ``attempt + 1`` after attempt ``attempt`` failed."""
    base = float(settings.retry_delay_seconds)
    if settings.retry_logic == "LINEAR_BACKOFF":
        delay = base * float(settings.backoff_scale_factor) * attempt
    elif settings.retry_logic == "EXPONENTIAL_BACKOFF":
        delay = base * 2 ** (attempt - 1)
    else:
        delay = base
    if settings.max_retry_delay_seconds and settings.max_retry_delay_seconds > 0:
        delay = min(delay, float(settings.max_retry_delay_seconds))
    jitter = min(max(float(settings.retry_jitter), 0.0), 1.0)
    if jitter and delay > 0:
        # Shrink by up to ``jitter`` of the delay: never beyond the maximum, never negative.
        delay *= 1.0 - jitter * unit_fraction(key, attempt)
    return round(delay, 3)


MAX_INPUT_CHANGES = 10  # more attempts than that are no plan a person would write


def input_for_attempt(
    inputs: Mapping[str, Any], changes: Sequence[Mapping[str, Any]], attempt: int
) -> dict[str, Any]:
    """The input of attempt ``attempt``: ``inputs`` with the first ``attempt - 1`` changes
    merged over it in order (attempt 1, or no changes: ``inputs`` as it is)."""
    merged = dict(inputs)
    for change in changes[: max(attempt - 1, 0)]:
        merged.update(change)
    return merged


def input_changes_problems(value: Any) -> list[str]:
    """Why a ``retryInputChanges`` value cannot be used (empty: it can, or it is absent)."""
    if value is None:
        return []
    name = "retryInputChanges"
    if not isinstance(value, list):
        return [f"{name} must be a list of objects (one per retry), got {type(value).__name__}"]
    if len(value) > MAX_INPUT_CHANGES:
        return [f"{name} has {len(value)} changes; at most {MAX_INPUT_CHANGES}"]
    problems = []
    for i, change in enumerate(value):
        if not isinstance(change, Mapping) or not change:
            problems.append(f"{name}[{i}] must be a non-empty object of input keys, got {change!r}")
            continue
        for key, v in change.items():
            if not isinstance(key, str) or not key:
                problems.append(f"{name}[{i}] has an empty key")
            elif "${" in _text(v):
                problems.append(
                    f"{name}[{i}].{key} is an expression; changes are literal values "
                    "merged over the resolved input"
                )
    return problems


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        return " ".join(_text(v) for v in value.values())
    if isinstance(value, list):
        return " ".join(_text(v) for v in value)
    return ""


_UNITS = {
    "s": 1,
    "sec": 1,
    "secs": 1,
    "second": 1,
    "seconds": 1,
    "m": 60,
    "min": 60,
    "mins": 60,
    "minute": 60,
    "minutes": 60,
    "h": 3600,
    "hr": 3600,
    "hrs": 3600,
    "hour": 3600,
    "hours": 3600,
    "d": 86400,
    "day": 86400,
    "days": 86400,
}
_PART = re.compile(r"(\d+(?:\.\d+)?)\s*([a-zA-Z]+)")


def parse_duration(text: str) -> float:
    """Conductor WAIT durations: ``"30s"``, ``"5 minutes"``, ``"1h 30m"``, ``"2 days 4 hours"``."""
    cleaned = text.strip().lower().replace(",", " ")
    parts = _PART.findall(cleaned)
    if not parts or _PART.sub("", cleaned).strip():
        raise ValueError(f"cannot read duration {text!r} (e.g. '30s', '5 minutes', '1h 30m')")
    total = 0.0
    for amount, unit in parts:
        if unit not in _UNITS:
            raise ValueError(f"unknown unit {unit!r} in duration {text!r}")
        total += float(amount) * _UNITS[unit]
    return total


_UNTIL_FORMATS = ("%Y-%m-%d %H:%M %Z", "%Y-%m-%d %H:%M", "%Y-%m-%d")


def parse_until(text: str) -> datetime:
    """Conductor WAIT ``until``: ``"2026-11-29 14:00 UTC"``, ``"2026-11-29"``, or ISO 8601."""
    value = text.strip()
    candidates = [value.replace("Z", "+00:00")]
    for candidate in candidates:
        try:
            return _aware(datetime.fromisoformat(candidate))
        except ValueError:
            pass
    for fmt in _UNTIL_FORMATS:
        try:
            return _aware(datetime.strptime(value, fmt))
        except ValueError:
            continue
    raise ValueError(f"cannot read time {text!r} (expected 'yyyy-MM-dd HH:mm z' or ISO 8601)")


def _aware(parsed: datetime) -> datetime:
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def after(now: datetime, seconds: float) -> datetime:
    return now + timedelta(seconds=seconds)
