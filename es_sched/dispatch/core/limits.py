"""Rate and concurrency limits, changeable at run time by config events.

Token buckets per task type and per tenant (``rate`` tokens per second, ``burst`` at most) and
an in-flight bound per task type. ``admit`` checks every limit that applies and takes a token
from each only when all allow it, so a refused task consumes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime


@dataclass
class TokenBucket:
    rate: float  # tokens per second
    burst: float
    tokens: float = -1.0
    updated: datetime | None = None

    def _refill(self, now: datetime) -> None:
        if self.tokens < 0:
            self.tokens = self.burst
        elif self.updated is not None:
            elapsed = max(0.0, (now - self.updated).total_seconds())
            self.tokens = min(self.burst, self.tokens + elapsed * self.rate)
        self.updated = now

    def available(self, now: datetime) -> bool:
        self._refill(now)
        return self.tokens >= 1.0

    def take(self, now: datetime) -> None:
        self._refill(now)
        self.tokens -= 1.0


@dataclass
class Limits:
    type_rate: dict[str, TokenBucket] = field(default_factory=dict)
    tenant_rate: dict[str, TokenBucket] = field(default_factory=dict)
    type_concurrency: dict[str, int] = field(default_factory=dict)
    in_flight: dict[str, int] = field(default_factory=dict)
    refused: dict[str, int] = field(default_factory=dict)  # reason -> count, for metrics

    # -- config ----------------------------------------------------------------------------
    def set_type_rate(self, task_type: str, rate: float | None, burst: float | None = None) -> None:
        _set(self.type_rate, task_type, rate, burst)

    def set_tenant_rate(self, tenant: str, rate: float | None, burst: float | None = None) -> None:
        _set(self.tenant_rate, tenant, rate, burst)

    def set_concurrency(self, task_type: str, limit: int | None) -> None:
        if limit is None:
            self.type_concurrency.pop(task_type, None)
        else:
            self.type_concurrency[task_type] = limit

    # -- decisions -------------------------------------------------------------------------
    def admit(self, task_type: str, tenant: str | None, now: datetime) -> str | None:
        """None when the task may go now (tokens taken), else the name of the refusing limit."""
        limit = self.type_concurrency.get(task_type)
        if limit is not None and self.in_flight.get(task_type, 0) >= limit:
            return self._refuse("concurrency")
        buckets = [
            b for b in (self.type_rate.get(task_type), self.tenant_rate.get(tenant or "")) if b
        ]
        for bucket in buckets:
            if not bucket.available(now):
                return self._refuse(
                    "type_rate" if bucket is self.type_rate.get(task_type) else "tenant_rate"
                )
        for bucket in buckets:
            bucket.take(now)
        self.in_flight[task_type] = self.in_flight.get(task_type, 0) + 1
        return None

    def finished(self, task_type: str) -> None:
        self.in_flight[task_type] = max(0, self.in_flight.get(task_type, 0) - 1)

    def _refuse(self, reason: str) -> str:
        self.refused[reason] = self.refused.get(reason, 0) + 1
        return reason


def _set(table: dict[str, TokenBucket], key: str, rate: float | None, burst: float | None) -> None:
    if rate is None:
        table.pop(key, None)
        return
    current = table.get(key)
    new_burst = burst if burst is not None else max(1.0, rate)
    if current is None:
        table[key] = TokenBucket(rate, new_burst)
    else:
        current.rate, current.burst = rate, new_burst
        current.tokens = min(current.tokens, new_burst)
