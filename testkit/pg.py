"""PostgreSQL faults for tests that hold connections across them."""

from __future__ import annotations

from collections.abc import Iterable

import psycopg

TERMINATE_WAIT_MS = 10_000
"""How long ``terminate_backends`` waits for a signalled backend to exit."""


def terminate_backends(dsn: str, pids: Iterable[int]) -> int:
    """``pg_terminate_backend`` on ``pids``; how many of them are still in
    ``pg_stat_activity`` afterwards (0 proves the fault fired).

    Without a timeout the function only signals the backend and returns, so a backend still
    exiting was counted alive (seen in CI: ``1 == 0``). With one (PostgreSQL 14+) it waits
    until each backend has gone or ``TERMINATE_WAIT_MS`` has passed, so the count reads a fact."""
    held = list(pids)
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(
            "SELECT pg_terminate_backend(pid, %s) FROM unnest(%s::int[]) AS pid",
            [TERMINATE_WAIT_MS, held],
        )
        alive = admin.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s)", [held]
        ).fetchone()
    return int(alive[0]) if alive else 0
