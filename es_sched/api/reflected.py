"""The offsets the read model's rows reflect, per API process, reused for a short while.

Every read says which events its rows reflect (``X-Es-Sched-Reflects``, the console's
"Reflects", ``/api/v1``'s ``freshness``). Reading the checkpoints on every request costs a
connection checkout and a query, more than the rest of a workflow's detail under load (ADR
23). The routes read them BEFORE the rows, and a checkpoint only grows, so a value up to
``ES_SCHED_API_REFLECTS_CACHE_S`` old is still a lower bound of what the rows reflect: the
answer stays true, only a little less precise. Read-your-writes (``?after=``) never uses it:
it waits on the checkpoints themselves.
"""

from __future__ import annotations

import threading
import time

from starlette.concurrency import run_in_threadpool

from es_sched.api.services import Services
from es_sched.projections.postgres import queries


class Reflected:
    """``queries.reflected`` of one engine, read at most once per ``ttl_s`` (thread-safe)."""

    def __init__(self, svc: Services) -> None:
        self._svc = svc
        self._ttl = svc.settings.api.reflects_cache_s
        self._lock = threading.Lock()
        self._at = -1e18
        self._value: dict[str, dict[int, int]] = {}

    def get(self) -> dict[str, dict[int, int]]:
        """The value; when it is older than the ttl, one thread reads it again while the
        others keep answering with the older one (a lower bound too) instead of queueing."""
        if time.monotonic() - self._at < self._ttl:
            return self._value
        if not self._lock.acquire(blocking=self._at < 0):  # the first read: wait for it
            return self._value
        try:
            if time.monotonic() - self._at >= self._ttl:
                self._value = queries.reflected(self._svc.engine)
                self._at = time.monotonic()
            return self._value
        finally:
            self._lock.release()

    def fresh(self) -> dict[str, dict[int, int]] | None:
        """The value when it needs no read (younger than the ttl), else None."""
        return self._value if time.monotonic() - self._at < self._ttl else None


def _of(svc: Services) -> Reflected:
    return svc.reflected.get(lambda: Reflected(svc))


def reflected(svc: Services, topic: str) -> dict[int, int]:
    """partition -> next offset the rows of ``topic``'s events reflect (a lower bound)."""
    return dict(_of(svc).get().get(topic, {}))


def reflected_is_fresh(svc: Services) -> bool:
    """Whether ``reflected`` would answer without reading PostgreSQL."""
    return _of(svc).fresh() is not None


async def reflected_async(svc: Services, topic: str) -> dict[int, int]:
    """``reflected`` for a coroutine: the kept value on the event loop, a read on a thread."""
    value = _of(svc).fresh()
    if value is None:
        return await run_in_threadpool(reflected, svc, topic)
    return dict(value.get(topic, {}))
