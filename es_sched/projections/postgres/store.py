"""The PostgreSQL read-model store: migrations, version-guarded batch writes, checkpoints.

Every connection's ``search_path`` is one schema (``ES_SCHED_PG_SCHEMA_NAME``), created and
migrated by Alembic (``migrate``). ``PgStore.write`` runs one transaction: a shared advisory
lock (a rebuild's switch takes it exclusively, so no batch straddles a switch), upserts of whole
workflow and task rows that replace a row only with a higher ``version``, the event archive
(``ON CONFLICT DO NOTHING``; refusals outside any history, seq 0, go to ``rejections``, keyed
by event id) and the checkpoints (``GREATEST`` of old and new). Connection
failures become ``StoreUnavailable``.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import psycopg
from alembic import command
from alembic.config import Config
from sqlalchemy import (
    Connection,
    Engine,
    String,
    any_,
    bindparam,
    create_engine,
    func,
    select,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, insert
from sqlalchemy.exc import DBAPIError, OperationalError

from es_sched.domain.events import WorkflowRejected
from es_sched.domain.refusals import is_refusal
from es_sched.errors import InfrastructureError
from es_sched.projections.postgres.models import CHECKPOINTS, REJECTIONS, TASKS, WORKFLOWS
from es_sched.projections.store import Archived, Batch, StoreUnavailable
from es_sched.projections.views import TASK_FIELDS, WORKFLOW_FIELDS, Row, Rows
from es_sched.settings import Settings

MIGRATIONS = Path(__file__).parent / "migrations"
SHARED_LOCK = text("SELECT pg_advisory_xact_lock_shared(:k)")


def _json(value: Any) -> str:
    return orjson.dumps(value).decode()


def engine_for(
    settings: Settings, schema: str | None = None, pool_size: int = 4, max_overflow: int = 10
) -> Engine:
    """An engine on ``schema``. A projector needs a few connections; the API sizes its pool to
    its thread pool (``ES_SCHED_API_PG_POOL_SIZE``): an overflow connection is closed when it
    is returned, so a pool too small makes most requests pay a PostgreSQL connect."""
    schema = schema or settings.postgres.schema_name
    return create_engine(
        settings.postgres.engine_url,
        pool_pre_ping=True,
        pool_recycle=1800,  # a connection older than this is replaced, not reused for ever
        pool_size=pool_size,
        max_overflow=max_overflow,
        json_serializer=_json,
        json_deserializer=orjson.loads,
        # TimeZone=UTC, as AsyncReads' sessions (ADR 38): psycopg then decodes timestamps to
        # ``timezone.utc``, the zone of every time the core makes. Under the server's own zone
        # they come as ``ZoneInfo`` times, and comparing one with the fold's is many times
        # slower (``replay --verify`` compares three per row;
        # bench/results/archive/replay_verify_utc.json).
        connect_args={"options": f"-c search_path={schema} -c TimeZone=UTC", "connect_timeout": 5},
    )


def lock_key(schema: str) -> int:
    return zlib.crc32(f"es-sched-projection:{schema}".encode())


def migrate(engine: Engine, schema: str) -> None:
    """Create the schema if needed and upgrade it to the newest revision."""
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    try:
        with engine.begin() as conn:
            cfg.attributes["connection"], cfg.attributes["schema"] = conn, schema
            command.upgrade(cfg, "head")
    except OperationalError as exc:
        raise StoreUnavailable(f"PostgreSQL: {exc.orig}") from exc


@contextmanager
def available(
    what: str, unavailable: type[InfrastructureError] = StoreUnavailable
) -> Iterator[None]:
    """PostgreSQL failures a caller can wait out become ``unavailable`` (a 503 in the API, a
    pause for a projector); everything else is raised as it is."""
    try:
        yield
    except OperationalError as exc:
        raise unavailable(f"PostgreSQL {what}: {exc.orig}") from exc
    except psycopg.OperationalError as exc:
        # The driver's own, unwrapped: ``write`` COPYs through the raw connection, and a
        # statement canceled there (``pg_cancel_backend``, a role's ``statement_timeout`` or
        # ``lock_timeout``) escaped as ``QueryCanceled`` where the same cancel of a SQLAlchemy
        # statement paused the projector (tests/integration/test_projection_pg.py).
        raise unavailable(f"PostgreSQL {what}: {exc}") from exc
    except DBAPIError as exc:
        if exc.connection_invalidated:
            raise unavailable(f"PostgreSQL {what}: {exc.orig}") from exc
        if isinstance(exc.orig, psycopg.errors.UndefinedTable):
            # A reader before the first projector-pg migrated the schema (the API started
            # first, say): the read model is not there yet, which is an outage, not a bug.
            raise unavailable(
                f"PostgreSQL {what}: the read model's tables do not exist yet (no projector-pg "
                f"has migrated this schema; `es-sched projections migrate`): {exc.orig}"
            ) from exc
        raise


JSON_FIELDS = frozenset({"input", "output", "resources", "payload"})
ARCHIVE_FIELDS = (
    "workflow_id",
    "seq",
    "event_id",
    "type",
    "occurred_at",
    "causation_id",
    "correlation_id",
    "kafka_partition",
    "kafka_offset",
    "actor",
)
KEYS = {"workflows": "workflow_id", "tasks": "task_id", "events": "workflow_id, seq"}
# A load's ids go as one array parameter (``= ANY(:ids)``), not as an IN list of a parameter
# each: thousands of ids made a statement of thousands of parameters that SQLAlchemy
# rendered, psycopg split and PostgreSQL parsed on every load. The plans are the same (index
# scans for a few ids, a sequential scan for thousands).
_IDS = bindparam("ids", type_=ARRAY(String))
LOAD_WORKFLOWS = select(WORKFLOWS).where(WORKFLOWS.c.workflow_id == any_(_IDS))
LOAD_TASKS = select(TASKS).where(TASKS.c.workflow_id == any_(_IDS))


def _copy_upsert(
    conn: psycopg.Connection, table: str, fields: tuple[str, ...], rows: list[Row]
) -> None:
    """COPY the rows into a temporary staging table, then one INSERT .. SELECT: rows replace
    stored ones only with a higher ``version`` (the archive never replaces: DO NOTHING).
    COPY moves a batch in one stream where row-at-a-time inserts from Python pay a statement
    per row."""
    stage, columns = f"stage_{table}", ", ".join(fields)
    copied = (*fields, "payload") if table == "events" else fields
    selected = f"{columns}, (payload::jsonb) -> 'payload'" if table == "events" else columns
    into = f"{columns}, payload" if table == "events" else columns
    with conn.cursor() as cur:
        cur.execute(
            f"CREATE TEMP TABLE IF NOT EXISTS {stage} "
            f"(LIKE {table} INCLUDING DEFAULTS) ON COMMIT DELETE ROWS"
        )
        json_at = [i for i, f in enumerate(copied) if f in JSON_FIELDS and table != "events"]
        with cur.copy(f"COPY {stage} ({', '.join(copied)}) FROM STDIN") as copy:
            for row in rows:
                values = [row[f] for f in copied]
                for i in json_at:
                    values[i] = orjson.dumps(values[i]).decode()
                copy.write_row(values)
        if table == "events":
            action = "DO NOTHING"
        else:
            updates = ", ".join(f"{f} = EXCLUDED.{f}" for f in fields if f != KEYS[table])
            action = f"DO UPDATE SET {updates} WHERE {table}.version < EXCLUDED.version"
        # Table and column names are this module's constants: no injection.
        cur.execute(
            f"INSERT INTO {table} ({into}) SELECT {selected} FROM {stage} "  # noqa: S608
            f"ON CONFLICT ({KEYS[table]}) {action}"
        )


class PgStore:
    """The ``Store`` port over PostgreSQL (one schema)."""

    def __init__(
        self,
        settings: Settings,
        schema: str | None = None,
        projection: str = "pg",
        pool_size: int = 4,
        max_overflow: int = 10,
    ) -> None:
        self.schema = schema or settings.postgres.schema_name
        self.name = projection
        self.engine = engine_for(settings, self.schema, pool_size, max_overflow)

    def ensure(self) -> None:
        migrate(self.engine, self.schema)

    # -- reads -----------------------------------------------------------------------------
    def load(self, workflow_ids: list[str]) -> dict[str, Rows]:
        if not workflow_ids:
            return {}
        # All rows in one fetch, each zipped with the columns: iterating a result (or its
        # ``mappings()``) fetches row by row through SQLAlchemy's and psycopg's per-row calls
        # (bench/results/archive/replay_verify_pg_fetch.json).
        with available("load"), self.engine.connect() as conn:
            found = conn.execute(LOAD_WORKFLOWS, {"ids": workflow_ids})
            names = tuple(found.keys())
            wf_at = names.index("workflow_id")
            out = {r[wf_at]: Rows(dict(zip(names, r, strict=True))) for r in found.all()}
            found = conn.execute(LOAD_TASKS, {"ids": list(out)})
            names = tuple(found.keys())
            wf_at, task_at = names.index("workflow_id"), names.index("task_id")
            for t in found.all():
                out[t[wf_at]].tasks[t[task_at]] = dict(zip(names, t, strict=True))
        return {wf: Rows.load(r.workflow, list(r.tasks.values())) for wf, r in out.items()}

    def checkpoints(self, topic: str, partitions: list[int]) -> dict[int, int]:
        with available("checkpoints"), self.engine.connect() as conn:
            return _checkpoints(conn, self.name, topic, partitions)

    # -- the batch -------------------------------------------------------------------------
    def write(self, topic: str, batch: Batch) -> None:
        now = datetime.now(UTC)
        with available("write"), self.engine.begin() as conn:
            conn.execute(SHARED_LOCK, {"k": lock_key(self.schema)})
            raw = conn.connection.driver_connection
            assert isinstance(raw, psycopg.Connection)
            if batch.workflows:
                _copy_upsert(raw, "workflows", WORKFLOW_FIELDS, list(batch.workflows.values()))
            if batch.tasks:
                _copy_upsert(raw, "tasks", TASK_FIELDS, list(batch.tasks.values()))
            history = [a for a in batch.archive if not is_refusal(a.event)]
            if history:
                rows = [_archived(a.event, a.raw, a.partition, a.offset) for a in history]
                _copy_upsert(raw, "events", ARCHIVE_FIELDS, rows)
            if len(history) < len(batch.archive):  # refusals: rare, keyed by event id
                refusals = [_refusal(a) for a in batch.archive if is_refusal(a.event)]
                conn.execute(
                    insert(REJECTIONS).on_conflict_do_nothing(index_elements=["event_id"]),
                    refusals,
                )
            parts = sorted(set(batch.checkpoints) | set(batch.duplicates))
            if parts:
                stmt = insert(CHECKPOINTS)
                conn.execute(
                    stmt.on_conflict_do_update(
                        index_elements=["projection", "topic", "kafka_partition"],
                        set_={
                            "next_offset": func.greatest(
                                CHECKPOINTS.c.next_offset, stmt.excluded.next_offset
                            ),
                            "duplicates_skipped": CHECKPOINTS.c.duplicates_skipped
                            + stmt.excluded.duplicates_skipped,
                            "updated_at": stmt.excluded.updated_at,
                        },
                    ),
                    [
                        {
                            "projection": self.name,
                            "topic": topic,
                            "kafka_partition": p,
                            "next_offset": batch.checkpoints.get(p, 0),
                            "duplicates_skipped": batch.duplicates.get(p, 0),
                            "updated_at": now,
                        }
                        for p in parts
                    ],
                )

    def close(self) -> None:
        self.engine.dispose()


def _checkpoints(conn: Connection, projection: str, topic: str, parts: list[int]) -> dict[int, int]:
    c = CHECKPOINTS.c
    rows = conn.execute(
        select(c.kafka_partition, c.next_offset).where(
            c.projection == projection, c.topic == topic, c.kafka_partition.in_(parts)
        )
    )
    return {int(p): int(o) for p, o in rows}


def _refusal(a: Archived) -> Row:
    p = a.event.payload
    assert isinstance(p, WorkflowRejected)
    return {
        "event_id": a.event.event_id,
        "workflow_id": a.event.workflow_id,
        "command_id": p.command_id,
        "command_type": p.command_type,
        "reason": p.reason,
        "occurred_at": a.event.occurred_at,
        "payload": orjson.loads(a.raw)["payload"],
        "kafka_partition": a.partition,
        "kafka_offset": a.offset,
        "actor": a.event.actor,
    }


def _archived(event: Any, raw: bytes, partition: int, offset: int) -> Row:
    return {
        "workflow_id": event.workflow_id,
        "seq": event.seq,
        "event_id": event.event_id,
        "type": event.type,
        "occurred_at": event.occurred_at,
        "causation_id": event.causation_id,
        "correlation_id": event.correlation_id,
        "payload": raw.decode(),  # the whole event; PostgreSQL keeps its payload
        "kafka_partition": partition,
        "kafka_offset": offset,
        "actor": event.actor,
    }
