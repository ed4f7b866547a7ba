"""PostgreSQL faults for tests that hold connections across them."""

from __future__ import annotations

from collections.abc import Iterable

import psycopg


def terminate_backends(dsn: str, pids: Iterable[int]) -> int:
    """``pg_terminate_backend`` on ``pids``; how many of them are still in
    ``pg_stat_activity`` afterwards (0 proves the fault fired)."""
    held = list(pids)
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(pid) FROM unnest(%s::int[]) AS pid", [held])
        alive = admin.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s)", [held]
        ).fetchone()
    return int(alive[0]) if alive else 0
