"""Retry delays and wait durations: pure arithmetic on the attempt number.

A retry decision needs only the attempt count (never old attempts' data). Jitter is derived
from a hash of the task id and attempt, so it is spread across tasks yet replays identically.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

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
