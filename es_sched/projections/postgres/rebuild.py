"""``es-sched projections rebuild``: project the whole log into fresh tables or indices, then
switch readers and the live projector over atomically.

PostgreSQL: the rows go into the schema ``<schema>_rebuild``; when it has caught up, one
transaction takes the live schema's advisory lock exclusively (a live batch holds it shared, so
none straddles the switch), checks the rebuild is not behind the live checkpoints (or catches
up again), and renames the live schema away and the rebuild into its place. Connections name
tables through their ``search_path``, so every reader and the live projector see the new rows
from their next statement; the old schema is dropped afterwards.

Search: the rows go into indices of a new generation; the aliases are swapped in one request,
then the rebuild catches up once more so that anything the live projector wrote into the old
generation between the rebuild's last read and the swap is in the new one too (documents carry
external versions, so the order of the two writers does not matter).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from sqlalchemy import Connection, text

from es_sched.kafka.topics import topics_for
from es_sched.projections.catch_up import catch_up
from es_sched.projections.postgres.store import PgStore, engine_for, lock_key
from es_sched.projections.projector import Projector
from es_sched.settings import Settings

Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class Rebuilt:
    target: str
    records: int
    seconds: float
    retired: str  # the schema or generation switched away from ("" when there was none)


def _checkpoints(conn: Connection, schema: str, topic: str) -> dict[int, int]:
    # Schema names are validated by PostgresSettings (^[a-z_][a-z0-9_]*$): no injection.
    rows = conn.execute(
        text(
            f'SELECT kafka_partition, next_offset FROM "{schema}".checkpoints '  # noqa: S608
            "WHERE projection = 'pg' AND topic = :t"
        ),
        {"t": topic},
    )
    return {int(p): int(o) for p, o in rows}


def rebuild_pg(settings: Settings, progress: Progress | None = None) -> Rebuilt:
    started, live = time.monotonic(), settings.postgres.schema_name
    fresh, retired = f"{live}_rebuild", f"{live}_retired_{int(time.time())}"
    admin = engine_for(settings, "public")
    with admin.begin() as conn:
        conn.execute(text(f'DROP SCHEMA IF EXISTS "{fresh}" CASCADE'))
    store = PgStore(settings, schema=fresh)
    store.ensure()
    group = f"{settings.kafka.topic_prefix}-projector-pg-rebuild"
    # The bulk of the log in partition groups, one process each (ADR 32); the rest below.
    records = catch_up(settings, partial(PgStore, settings, schema=fresh), group, progress)
    topic = topics_for(settings).events
    while True:
        with admin.begin() as conn:
            exists = conn.execute(
                text("SELECT 1 FROM pg_namespace WHERE nspname = :n"), {"n": live}
            ).first()
            ahead = True
            if exists:
                conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": lock_key(live)})
                have, want = _checkpoints(conn, fresh, topic), _checkpoints(conn, live, topic)
                ahead = all(have.get(p, 0) >= o for p, o in want.items())
            if ahead:
                if exists:
                    conn.execute(text(f'ALTER SCHEMA "{live}" RENAME TO "{retired}"'))
                conn.execute(text(f'ALTER SCHEMA "{fresh}" RENAME TO "{live}"'))
                break
        records += Projector(settings, store, group=group).catch_up(progress)
    with admin.begin() as conn:
        conn.execute(text(f'DROP SCHEMA IF EXISTS "{retired}" CASCADE'))
    admin.dispose()
    return Rebuilt("pg", records, time.monotonic() - started, retired if exists else "")
