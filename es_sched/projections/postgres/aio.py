"""The API's hottest reads on asyncio, each in one round trip (ADR 37): a workflow and its
tasks, a search page and its capped count, the console's list and its counts per status.

``queries.workflow`` through SQLAlchemy, in a FastAPI ``def`` route, costs a workflow's detail
a thread-pool hop, a pool checkout with a pre-ping (``SELECT 1``: a round trip of its own), two
more round trips and SQLAlchemy's execution context and result wrapping, which bounded what
one API process answered (ADR 37). Here the same two statements
(compiled once from ``queries``' SQLAlchemy selects, so the SQL lives in one place) run in one
psycopg pipeline (one round trip) on a kept autocommit ``AsyncConnection``, in the event loop.
Search and the console's list run ``pages``' statements for them (built and compiled once per
shape of filter, each request binding its values) in one pipeline too, inside ``BEGIN
ISOLATION LEVEL REPEATABLE READ READ ONLY`` ... ``COMMIT``: the count and the page see the same
rows, as in ``pages.snapshot``. Sessions run in UTC: timestamps decode to ``timezone.utc``
(``ZoneInfo('Etc/UTC')``, the server's default here, cost each of them a lookup when read and
formatted).
``tests/integration/test_aio_reads.py`` holds every answer equal to ``queries``' and ``pages``'.

No pre-ping: a connection found dead (the server restarted, the network dropped it) fails with
``OperationalError``; it is closed and the read runs once more on a new connection (a read is
safe to rerun). Failing again, PostgreSQL is unavailable: ``StoreUnavailable``, a 503. At most
``size`` reads run at once (``ES_SCHED_API_PG_ASYNC_POOL_SIZE``), each on a kept connection; the
others wait for one (opening a connection per read beyond the pool, with 50 clients, one
process answered 180 requests/s; 16 kept connections per process, 631; 4, 799: more
backends at once only contend for the two cores). Connections
belong to the event loop that opened them: on another loop (a test's second client) the kept
ones are dropped and new ones opened.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import Any, TypeVar

import orjson
import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import set_json_loads
from sqlalchemy import bindparam, select
from sqlalchemy.dialects.postgresql.psycopg import dialect as psycopg_dialect

from es_sched.projections.postgres import pages
from es_sched.projections.postgres.models import TASKS, WORKFLOWS
from es_sched.projections.postgres.queries import WorkflowFilter
from es_sched.projections.store import StoreUnavailable
from es_sched.projections.views import Row

CONNECT_TIMEOUT_S = 5
T = TypeVar("T")
Conn = psycopg.AsyncConnection[dict[str, Any]]


DIALECT = psycopg_dialect()  # type: ignore[no-untyped-call]


def _sql(statement: Any) -> str:
    return str(statement.compile(dialect=DIALECT))


COMPILED: dict[Any, Any] = {}  # (statement shape, which statement) -> its compiled form
COMPILED_MAX = 512


def _compiled(found: pages.Statements) -> list[tuple[str, dict[str, Any]]]:
    """Each statement of ``found`` as SQL and parameters (their IN lists expanded).

    Compiling is a large part of a search's CPU (ADR 38); each shape is compiled once and
    each request only fills in its values, as SQLAlchemy's own engine does.
    ``test_aio_reads`` holds the answers equal to the SQLAlchemy queries' over filters of
    every kind."""
    out = []
    for n, statement in enumerate(found.statements):
        done = COMPILED.get((found.shape, n))
        if done is None:
            if len(COMPILED) >= COMPILED_MAX:
                COMPILED.clear()
            done = COMPILED[found.shape, n] = DIALECT.statement_compiler(DIALECT, statement)
        expanded = done.construct_expanded_state(found.params, escape_names=False)
        out.append((str(expanded.statement), dict(expanded.parameters)))
    return out


# The statements of ``queries.workflow``, with its order (attempts in schedule order).
WORKFLOW_SQL = _sql(select(WORKFLOWS).where(WORKFLOWS.c.workflow_id == bindparam("id")))
TASKS_SQL = _sql(
    select(TASKS)
    .where(TASKS.c.workflow_id == bindparam("id"))
    .order_by(TASKS.c.scheduled_at, TASKS.c.version)
)


class AsyncReads:
    def __init__(self, dsn: str, schema: str, size: int) -> None:
        self._dsn, self._schema, self._size = dsn, schema, size
        self._idle: list[Conn] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._slots = asyncio.Semaphore(size)

    async def workflow(self, workflow_id: str) -> tuple[Row | None, list[Row]]:
        """``queries.workflow``: the workflow's row (None when absent) and its task rows."""

        async def run(conn: Conn) -> tuple[Row | None, list[Row]]:
            params = {"id": workflow_id}
            async with conn.pipeline():
                found = await conn.execute(WORKFLOW_SQL, params)
                tasks = await conn.execute(TASKS_SQL, params)
            return await found.fetchone(), await tasks.fetchall()

        return await self._with(run)

    async def search_page(
        self,
        f: WorkflowFilter,
        start: int,
        size: int,
        sort: Sequence[tuple[str, bool]],
        cap: int,
    ) -> tuple[int, bool, list[Row]]:
        """``pages.search_page``: its statements, in one snapshot, in one round trip."""
        count, page = await self._snapshot(pages.search_statements(f, start, size, sort, cap))
        return *pages.capped(int(next(iter(count[0].values()))), start, cap), page

    async def console_page(
        self, f: WorkflowFilter, statuses: Sequence[str], start: int, size: int, cap: int
    ) -> tuple[dict[str, int], frozenset[str], list[Row]]:
        """``pages.console_page``: its statements, in one snapshot, in one round trip."""
        found = pages.console_statements(f, statuses, start, size, cap)
        if not statuses:  # the page alone
            (rows,) = await self._snapshot(replace(found, statements=found.statements[1:]))
            return {}, frozenset(), rows
        counts, rows = await self._snapshot(found)
        return *pages.console_counts(statuses, list(counts[0].values()), start, cap), rows

    async def _snapshot(self, found: pages.Statements) -> list[list[Row]]:
        """Each statement's rows, all in one REPEATABLE READ, read-only transaction (the same
        rows for every statement), sent in one pipeline."""
        compiled = _compiled(found)

        async def run(conn: Conn) -> list[list[Row]]:
            async with conn.pipeline():
                await conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
                cursors = [await conn.execute(sql, params) for sql, params in compiled]
                await conn.execute("COMMIT")
            return [await cursor.fetchall() for cursor in cursors]

        return await self._with(run)

    def close(self) -> None:
        """Close the kept connections (without their event loop: ``Services.close``)."""
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.pgconn.finish()

    async def _with(self, run: Callable[[Conn], Awaitable[T]]) -> T:
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            for stale in self._idle:  # opened on a loop that is gone: closed without it
                stale.pgconn.finish()
            self._idle, self._loop, self._slots = [], loop, asyncio.Semaphore(self._size)
        async with self._slots:  # a read waits for a connection rather than open one more
            return await self._run(run)

    async def _run(self, run: Callable[[Conn], Awaitable[T]]) -> T:
        for attempt in (1, 2):
            conn = await self._take()
            try:
                found = await run(conn)
            except psycopg.OperationalError as exc:
                dropped = conn.broken  # read first: broken is False once closed by us
                await conn.close()
                if attempt == 2 or not dropped:
                    raise StoreUnavailable(f"PostgreSQL read: {exc}") from exc
                continue
            except BaseException:
                await conn.close()  # in an unknown state: not given to the next caller
                raise
            await self._give(conn)
            return found
        raise AssertionError("unreachable")  # pragma: no cover

    async def _take(self) -> Conn:
        if self._idle:
            return self._idle.pop()
        try:
            conn = await psycopg.AsyncConnection.connect(
                self._dsn,
                autocommit=True,
                row_factory=dict_row,
                connect_timeout=CONNECT_TIMEOUT_S,
                options=f"-c search_path={self._schema} -c TimeZone=UTC",
            )
        except psycopg.OperationalError as exc:
            raise StoreUnavailable(f"PostgreSQL read: {exc}") from exc
        set_json_loads(orjson.loads, conn)
        return conn

    async def _give(self, conn: Conn) -> None:
        if len(self._idle) < self._size and not conn.closed:
            self._idle.append(conn)
            return
        await conn.close()
