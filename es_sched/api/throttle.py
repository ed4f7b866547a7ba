"""Throttled log-ins: ``POST /api/token`` and the console's ``POST /ui/login`` (issue 52).

Each wrong key or secret counts a failure in two buckets: the key id tried from that address,
and the address. A bucket's window starts at its first failure and lasts
``ES_SCHED_API_LOGIN_WINDOW_S``; once a bucket holds ``ES_SCHED_API_LOGIN_KEY_FAILURES`` (the
key at that address) or ``ES_SCHED_API_LOGIN_ADDRESS_FAILURES`` (the address) failures, every
attempt it covers is answered 429 with ``Retry-After`` (the seconds left in its window) before
the secret is even hashed. A success clears its key-at-address bucket.

A key is never counted across addresses: a key-wide count would let any address lock the key's
owner out by failing on purpose. Guessing a key's secret from many addresses is what the
secret's 256 random bits stop (``keys.new_key``); the throttle stops cheap hammering from one
place and the argon2 hashing it would cost (64 MiB and a few tens of ms a try).

The counts live in PostgreSQL, beside the keys (``<schema>_auth.login_failures``), so every
API process of a deployment (``es-sched api --workers N``, whose kernel spreads connections
over the processes, or several hosts) counts the same failures: per process, N processes would
allow N times the limit. An attempt is checked, then counted: attempts racing from one address
on several processes at once may pass the limit by as many as are in flight.

The address is the TCP peer the API sees; behind a proxy it is the proxy's, and every client
behind it shares its address bucket (forwarded headers are not trusted: anyone can write one).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Protocol

from sqlalchemy import bindparam, text

from es_sched.api.errors import ApiError
from es_sched.api.keys import PgKeys
from es_sched.settings import ApiSettings

RETRY_AFTER = "Retry-After"


class TooManyAttempts(ApiError):
    """A 429 with ``Retry-After``: this key or address failed too often in its window."""

    def __init__(self, retry_after_s: int) -> None:
        super().__init__(
            429,
            f"too many failed log-ins; try again in {retry_after_s} s",
            headers={RETRY_AFTER: str(retry_after_s)},
        )
        self.retry_after_s = retry_after_s


class Failures(Protocol):
    """Failure counts per bucket: PostgreSQL in the API, a dict in unit tests."""

    def current(self, buckets: list[str], since: datetime) -> dict[str, tuple[int, datetime]]:
        """(failures, window start) of the buckets whose window started after ``since``."""
        ...

    def count(self, buckets: list[str], now: datetime, since: datetime) -> None:
        """One more failure in each bucket; a window that started by ``since`` starts anew."""
        ...

    def clear(self, bucket: str) -> None: ...


class LoginThrottle:
    """The rule (see the module); ``failures`` is built on first use."""

    def __init__(
        self,
        settings: ApiSettings,
        failures: Callable[[], Failures],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._limits = (settings.login_key_failures, settings.login_address_failures)
        self._window = timedelta(seconds=settings.login_window_s)
        self._failures = failures
        self._clock = clock

    def check(self, key_id: str, address: str) -> None:
        """Raise ``TooManyAttempts`` when a bucket of this attempt is full."""
        now = self._now()
        buckets = _buckets(key_id, address)
        found = self._failures().current(buckets, now - self._window)
        waits = [
            (started + self._window - now).total_seconds()
            for bucket, limit in zip(buckets, self._limits, strict=True)
            for failures, started in [found.get(bucket, (0, now))]
            if failures >= limit
        ]
        if waits:
            raise TooManyAttempts(max(1, math.ceil(max(waits))))

    def failed(self, key_id: str, address: str) -> None:
        now = self._now()
        self._failures().count(_buckets(key_id, address), now, now - self._window)

    def succeeded(self, key_id: str, address: str) -> None:
        self._failures().clear(_buckets(key_id, address)[0])

    def _now(self) -> datetime:
        return datetime.fromtimestamp(self._clock(), UTC)


def _buckets(key_id: str, address: str) -> list[str]:
    """The key-at-address bucket, then the address's (the order of the limits)."""
    return [f"key {key_id} at {address}", f"address {address}"]


class MemoryFailures:
    """``Failures`` in a dict: unit tests, and one-process deployments' tests."""

    def __init__(self) -> None:
        self.rows: dict[str, tuple[int, datetime]] = {}

    def current(self, buckets: list[str], since: datetime) -> dict[str, tuple[int, datetime]]:
        return {b: self.rows[b] for b in buckets if b in self.rows and self.rows[b][1] > since}

    def count(self, buckets: list[str], now: datetime, since: datetime) -> None:
        for b in buckets:
            failures, started = self.rows.get(b, (0, now))
            self.rows[b] = (1, now) if started <= since else (failures + 1, started)

    def clear(self, bucket: str) -> None:
        self.rows.pop(bucket, None)


class PgFailures:
    """``Failures`` in ``<schema>.login_failures``, beside the keys (``keys.PgKeys`` makes
    the table with its own). Windows that ended are deleted at most once a window by each
    process."""

    def __init__(self, keys: PgKeys) -> None:
        self.keys, self.table = keys, f"{keys.schema}.login_failures"
        self._purged = datetime.min.replace(tzinfo=UTC)
        self._lock = threading.Lock()

    def current(self, buckets: list[str], since: datetime) -> dict[str, tuple[int, datetime]]:
        query = text(
            f"SELECT bucket, failures, window_start FROM {self.table} "  # noqa: S608
            "WHERE bucket IN :buckets AND window_start > :since"
        ).bindparams(bindparam("buckets", expanding=True))
        with self.keys.connect("read log-in failures") as conn:
            rows = conn.execute(query, {"buckets": buckets, "since": since}).all()
        return {str(b): (int(n), started) for b, n, started in rows}

    def count(self, buckets: list[str], now: datetime, since: datetime) -> None:
        upsert = text(
            f"INSERT INTO {self.table} AS f (bucket, failures, window_start) "  # noqa: S608
            "VALUES (:bucket, 1, :now) ON CONFLICT (bucket) DO UPDATE SET "
            "failures = CASE WHEN f.window_start <= :since THEN 1 ELSE f.failures + 1 END, "
            "window_start = CASE WHEN f.window_start <= :since THEN :now ELSE f.window_start END"
        )
        with self.keys.connect("count a log-in failure", write=True) as conn:
            for bucket in sorted(buckets):  # one order in every process: no deadlock
                conn.execute(upsert, {"bucket": bucket, "now": now, "since": since})
            if self._due(now, since):
                purge = f"DELETE FROM {self.table} WHERE window_start <= :since"  # noqa: S608
                conn.execute(text(purge), {"since": since})

    def clear(self, bucket: str) -> None:
        delete = f"DELETE FROM {self.table} WHERE bucket = :bucket"  # noqa: S608
        with self.keys.connect("clear log-in failures", write=True) as conn:
            conn.execute(text(delete), {"bucket": bucket})

    def _due(self, now: datetime, since: datetime) -> bool:
        with self._lock:
            if self._purged > since:
                return False
            self._purged = now
            return True
