"""The PostgreSQL read-model store: migrations, version-guarded batch writes, checkpoints.

Every connection's ``search_path`` is one schema (``ES_SCHED_PG_SCHEMA_NAME``), created and
migrated by Alembic (``migrate``). ``PgStore.write`` runs one transaction: a shared advisory
lock (a rebuild's switch takes it exclusively, so no batch straddles a switch), upserts of whole
workflow and task rows that replace a row only with a higher ``version``, the event archive
(``ON CONFLICT DO NOTHING``) and the checkpoints (``GREATEST`` of old and new). Connection
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
from alembic import command
from alembic.config import Config
from sqlalchemy import Connection, Engine, create_engine, func, select, text
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.exc import DBAPIError, OperationalError

from es_sched.projections.models import CHECKPOINTS, EVENTS, TASKS, WORKFLOWS
from es_sched.projections.store import Batch, StoreUnavailable
from es_sched.projections.views import TASK_FIELDS, WORKFLOW_FIELDS, Row, Rows
from es_sched.settings import Settings

MIGRATIONS = Path(__file__).parent / "migrations"
SHARED_LOCK = text("SELECT pg_advisory_xact_lock_shared(:k)")


def _json(value: Any) -> str:
    return orjson.dumps(value).decode()


def engine_for(settings: Settings, schema: str | None = None) -> Engine:
    schema = schema or settings.postgres.schema_name
    return create_engine(
        settings.postgres.url,
        pool_pre_ping=True,
        pool_size=4,
        json_serializer=_json,
        json_deserializer=orjson.loads,
        connect_args={"options": f"-c search_path={schema}", "connect_timeout": 5},
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
def available(what: str) -> Iterator[None]:
    try:
        yield
    except OperationalError as exc:
        raise StoreUnavailable(f"PostgreSQL {what}: {exc.orig}") from exc
    except DBAPIError as exc:
        if exc.connection_invalidated:
            raise StoreUnavailable(f"PostgreSQL {what}: {exc.orig}") from exc
        raise


def _guarded_upsert(table: Any, fields: tuple[str, ...], key: str) -> Any:
    """INSERT .. ON CONFLICT DO UPDATE .. WHERE the stored version is older (executemany)."""
    stmt = insert(table)
    columns = {c: stmt.excluded[c] for c in fields if c != key}
    return stmt.on_conflict_do_update(
        index_elements=[key], set_=columns, where=table.c.version < stmt.excluded.version
    )


class PgStore:
    """The ``Store`` port over PostgreSQL (one schema)."""

    def __init__(
        self, settings: Settings, schema: str | None = None, projection: str = "pg"
    ) -> None:
        self.schema = schema or settings.postgres.schema_name
        self.name = projection
        self.engine = engine_for(settings, self.schema)

    def ensure(self) -> None:
        migrate(self.engine, self.schema)

    # -- reads -----------------------------------------------------------------------------
    def load(self, workflow_ids: list[str]) -> dict[str, Rows]:
        if not workflow_ids:
            return {}
        with available("load"), self.engine.connect() as conn:
            wfs = conn.execute(
                select(WORKFLOWS).where(WORKFLOWS.c.workflow_id.in_(workflow_ids))
            ).mappings()
            out = {r["workflow_id"]: Rows(dict(r)) for r in wfs}
            tasks = conn.execute(select(TASKS).where(TASKS.c.workflow_id.in_(list(out)))).mappings()
            for t in tasks:
                out[t["workflow_id"]].tasks[t["task_id"]] = dict(t)
        return {wf: Rows.load(r.workflow, list(r.tasks.values())) for wf, r in out.items()}

    def checkpoints(self, topic: str, partitions: list[int]) -> dict[int, int]:
        with available("checkpoints"), self.engine.connect() as conn:
            return _checkpoints(conn, self.name, topic, partitions)

    # -- the batch -------------------------------------------------------------------------
    def write(self, topic: str, batch: Batch) -> None:
        now = datetime.now(UTC)
        with available("write"), self.engine.begin() as conn:
            conn.execute(
                text("SELECT pg_advisory_xact_lock_shared(:k)"), {"k": lock_key(self.schema)}
            )
            if batch.workflows:
                rows = [{f: r[f] for f in WORKFLOW_FIELDS} for r in batch.workflows.values()]
                conn.execute(_guarded_upsert(WORKFLOWS, WORKFLOW_FIELDS, "workflow_id"), rows)
            if batch.tasks:
                rows = [{f: r[f] for f in TASK_FIELDS} for r in batch.tasks.values()]
                conn.execute(_guarded_upsert(TASKS, TASK_FIELDS, "task_id"), rows)
            if batch.archive:
                conn.execute(
                    insert(EVENTS).on_conflict_do_nothing(),
                    [_archived(a.event, a.raw, a.partition, a.offset) for a in batch.archive],
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


def _archived(event: Any, raw: bytes, partition: int, offset: int) -> Row:
    doc = orjson.loads(raw)
    return {
        "workflow_id": event.workflow_id,
        "seq": event.seq,
        "event_id": event.event_id,
        "type": event.type,
        "occurred_at": event.occurred_at,
        "causation_id": event.causation_id,
        "correlation_id": event.correlation_id,
        "payload": doc.get("payload", {}),
        "kafka_partition": partition,
        "kafka_offset": offset,
    }
