"""Autocommit psycopg connections for the gateway's per-task statements (ADR 36).

Every HTTP task costs the store two statements: the poll's ``handed`` and the update's ``end``.
Through SQLAlchemy each was a pool checkout with a pre-ping (``SELECT 1``: a round trip of its
own before every statement), an execution context, a compile-cache lookup and a result
wrapper: a large share of the API's Python time under HTTP workers (ADR 36). These statements
need none of it: each is one autocommit statement (atomic alone), prepared by psycopg after its
first few runs, on a connection kept open here.

No pre-ping: a connection found dead (the server restarted, the network dropped it) fails its
statement with ``OperationalError``; it is closed, and the statement runs once more on a new
connection. Both statements may run twice: ``end`` marks a row only where none was marked (a
rerun finds its own first outcome), ``handed`` is one upsert of all the poll's rows. Failing again,
PostgreSQL is unavailable: ``StoreUnavailable``, a 503 the HTTP worker retries.

At most ``size`` connections are kept (the API's ``ES_SCHED_API_PG_POOL_SIZE``); a thread that
finds none idle opens one, and one returned to a full pool is closed.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

import psycopg
from psycopg.rows import dict_row

from es_sched.projections.store import StoreUnavailable

CONNECT_TIMEOUT_S = 5


class Connections:
    def __init__(self, dsn: str, schema: str, size: int) -> None:
        self._dsn, self._schema, self._size = dsn, schema, size
        self._idle: list[psycopg.Connection[dict[str, Any]]] = []
        self._lock = threading.Lock()

    def fetch_one(self, sql: str, params: Mapping[str, Any]) -> dict[str, Any] | None:
        """The first row of ``sql`` (autocommit), as a dict; None when it returns none."""

        def run(conn: psycopg.Connection[dict[str, Any]]) -> dict[str, Any] | None:
            return conn.execute(sql, params).fetchone()

        found: dict[str, Any] | None = self._with(run)
        return found

    def execute(self, sql: str, params: Mapping[str, Any]) -> None:
        """``sql``, autocommit: one statement is atomic alone."""

        def run(conn: psycopg.Connection[dict[str, Any]]) -> None:
            conn.execute(sql, params)

        self._with(run)

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    def _with(self, run: Any) -> Any:
        for attempt in (1, 2):
            conn = self._take()
            try:
                found = run(conn)
            except psycopg.OperationalError as exc:
                dropped = conn.broken  # read first: broken is False once closed by us
                conn.close()
                if attempt == 2 or not dropped:
                    raise StoreUnavailable(f"PostgreSQL gateway: {exc}") from exc
                continue
            except BaseException:
                conn.close()  # in an unknown state: not given to the next caller
                raise
            self._give(conn)
            return found
        raise AssertionError("unreachable")  # pragma: no cover

    def _take(self) -> psycopg.Connection[dict[str, Any]]:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        try:
            return psycopg.connect(
                self._dsn,
                autocommit=True,
                row_factory=dict_row,
                connect_timeout=CONNECT_TIMEOUT_S,
                options=f"-c search_path={self._schema}",
            )
        except psycopg.OperationalError as exc:
            raise StoreUnavailable(f"PostgreSQL gateway: {exc}") from exc

    def _give(self, conn: psycopg.Connection[dict[str, Any]]) -> None:
        with self._lock:
            if len(self._idle) < self._size and not conn.closed:
                self._idle.append(conn)
                return
        conn.close()
