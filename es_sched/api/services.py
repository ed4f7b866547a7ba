"""What the API's routes use, wired once by ``es_sched.bootstrap.api_services``.

A port in the cosmicpython sense: routes take ``Services`` from the request
(``services(request)``) and never build a client themselves, so tests and the benchmark can
hand the application the same services the API role runs with. Clients are made on first use:
the console's pages need no Kafka producer, a worker poll needs no search client.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from fastapi import Request

from es_sched.settings import Settings

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from es_sched.commands.client import CommandClient
    from es_sched.projections.postgres.aio import AsyncReads
    from es_sched.projections.postgres.store import PgStore
    from es_sched.projections.search.store import SearchStore

T = TypeVar("T")


class Lazy(Generic[T]):
    """One instance per process, built by ``make`` on first use (thread-safe)."""

    def __init__(self, make: Callable[[], T]) -> None:
        self._make = make
        self._value: T | None = None
        self._lock = threading.Lock()

    def get(self) -> T:
        if self._value is None:
            with self._lock:
                if self._value is None:
                    self._value = self._make()
        return self._value

    @property
    def built(self) -> bool:
        return self._value is not None


@dataclass
class Services:
    settings: Settings
    pg: Lazy[PgStore]
    search: Lazy[SearchStore]
    commands: Lazy[CommandClient]
    # Parts that later items attach (the gateway worker, the key store), by name.
    extras: dict[str, Any] = field(default_factory=dict)

    @property
    def engine(self) -> Engine:
        """The read model's engine (the live schema's ``search_path``)."""
        return self.pg.get().engine

    @property
    def reads(self) -> AsyncReads:
        """The read model's reads on asyncio (ADR 37), made on first use."""
        found = self.extras.get("reads")
        if found is None:
            from es_sched.projections.postgres.aio import AsyncReads  # noqa: PLC0415

            made = AsyncReads(
                self.settings.postgres.libpq_dsn,
                self.pg.get().schema,
                self.settings.api.pg_async_pool_size,
            )
            found = self.extras.setdefault("reads", made)
        reads: AsyncReads = found
        return reads

    def close(self) -> None:
        if self.commands.built:
            self.commands.get().close()
        for part in self.extras.values():
            close = getattr(part, "close", None)
            if callable(close):
                close()


async def services(request: Request) -> Services:
    """The FastAPI dependency: ``Depends(services)``. A coroutine, so FastAPI calls it on the
    event loop: a plain ``def`` dependency costs every request a hop to the thread pool and
    back (with ``require``'s, a fifth of the API's Python time on a workflow's detail)."""
    found: Services = request.app.state.services
    return found
