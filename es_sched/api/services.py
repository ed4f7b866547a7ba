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
from typing import TYPE_CHECKING, Generic, TypeVar

from fastapi import Request

from es_sched.settings import Settings

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from es_sched.api.auth import Authenticator
    from es_sched.api.conductor.tasks import WorkflowNames
    from es_sched.api.native.system import SystemBoard
    from es_sched.api.read_model_freshness import LogEnds
    from es_sched.api.readers import EventEnds, WorkerBoard
    from es_sched.api.reflected import Reflected
    from es_sched.api.writes import Settler
    from es_sched.commands.client import CommandClient
    from es_sched.domain.scripts import ScriptEngine
    from es_sched.kafka.roster import Beacon
    from es_sched.projections.postgres.aio import AsyncReads
    from es_sched.projections.postgres.store import PgStore
    from es_sched.projections.search.store import SearchStore
    from es_sched.workers.gateway import Gateway

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


class Part(Generic[T]):
    """One instance per process, built on first use by the module that owns it (thread-safe),
    closed by ``Services.close``. Unlike ``Lazy``, the builder comes with the call: it needs
    what the caller has (the services, the port the server listens on)."""

    def __init__(self) -> None:
        self._value: T | None = None
        self._lock = threading.Lock()

    def get(self, make: Callable[[], T]) -> T:
        if self._value is None:
            with self._lock:
                if self._value is None:
                    self._value = make()
        return self._value

    def peek(self) -> T | None:
        """The instance if it is built, without building it."""
        return self._value

    def put(self, value: T) -> None:
        """Use ``value`` (a test's fake) instead of building one."""
        self._value = value

    def close(self) -> None:
        close = getattr(self._value, "close", None)
        if callable(close):
            close()


@dataclass
class Services:
    settings: Settings
    pg: Lazy[PgStore]
    search: Lazy[SearchStore]
    commands: Lazy[CommandClient]
    auth: Authenticator | None = None  # bootstrap's; a test that logs nobody in may leave it
    # INLINE and javascript SWITCH for the console's simulate preview (bootstrap's QuickJS);
    # None: the preview runs without scripts and says so on such a task.
    scripts: Lazy[ScriptEngine] | None = None
    # What the API's modules build on first use, one per process:
    gateway: Part[Gateway] = field(default_factory=Part)  # api.gateway.gateway_of
    async_reads: Part[AsyncReads] = field(default_factory=Part)  # ``reads``
    reflected: Part[Reflected] = field(default_factory=Part)  # api.reflected
    event_ends: Part[EventEnds] = field(default_factory=Part)  # api.readers
    worker_board: Part[WorkerBoard] = field(default_factory=Part)  # api.readers
    log_ends: Part[LogEnds] = field(default_factory=Part)  # api.read_model_freshness
    workflow_names: Part[WorkflowNames] = field(default_factory=Part)  # api.conductor.tasks
    system_board: Part[SystemBoard] = field(default_factory=Part)  # api.native.system
    beacon: Part[Beacon] = field(default_factory=Part)  # this API process's liveness (ADR 61)
    settler: Part[Settler] = field(default_factory=Part)  # api.writes

    @property
    def engine(self) -> Engine:
        """The read model's engine (the live schema's ``search_path``)."""
        return self.pg.get().engine

    @property
    def reads(self) -> AsyncReads:
        """The read model's reads on asyncio (ADR 37), made on first use."""

        def make() -> AsyncReads:
            from es_sched.projections.postgres.aio import AsyncReads  # noqa: PLC0415

            return AsyncReads(
                self.settings.postgres.for_reading().libpq_dsn,
                self.pg.get().schema,
                self.settings.api.pg_async_pool_size,
            )

        return self.async_reads.get(make)

    def close(self) -> None:
        if self.commands.built:
            self.commands.get().close()
        if self.auth is not None:
            self.auth.close()
        for part in (
            self.gateway,
            self.async_reads,
            self.reflected,
            self.event_ends,
            self.worker_board,
            self.log_ends,
            self.workflow_names,
            self.system_board,
            self.beacon,
            self.settler,
        ):
            part.close()


async def services(request: Request) -> Services:
    """The FastAPI dependency: ``Depends(services)``. A coroutine, so FastAPI calls it on the
    event loop: a plain ``def`` dependency costs every request a hop to the thread pool and
    back (with ``require``'s, a fifth of the API's Python time on a workflow's detail)."""
    found: Services = request.app.state.services
    return found
