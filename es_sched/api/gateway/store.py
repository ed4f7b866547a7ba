"""The gateway leases on PostgreSQL (``es_sched.workers.gateway.leases.LeaseStore``, ADR 24).

The rows live in a schema of their own, ``<ES_SCHED_PG_SCHEMA_NAME>_gateway``: they are the
gateway's working state, not a projection, so a read-model rebuild never touches them and they
need no migration history (two tables, created if missing). ``leases`` has a row per task an
HTTP worker polled, with its first outcome (``ended``) and whether the dispatcher ended the
lease (``lease_over``); ``poll_data`` the last poll per task type, domain and HTTP worker;
``task_logs`` the lines an HTTP worker logged while its task runs (``POST
/api/tasks/{taskId}/log``, an ``IN_PROGRESS`` update's ``logs``), until the outcome carries
them to the decider (ADR 60); they go with their lease row.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Engine, text

from es_sched.api.gateway.conns import Connections
from es_sched.projections.postgres.store import available, engine_for
from es_sched.serialization import wire
from es_sched.settings import Settings
from es_sched.workers.gateway.leases import HeldLease

KEEP_ENDED = timedelta(hours=1)  # an ended row answers the SDK's retries that long

_DDL = (
    "CREATE SCHEMA IF NOT EXISTS {schema}",
    """CREATE TABLE IF NOT EXISTS {schema}.leases (
        task_id text PRIMARY KEY, workflow_id text NOT NULL, task_type text NOT NULL,
        attempt integer NOT NULL, lease_epoch integer NOT NULL, lease_token text NOT NULL,
        gateway_id text NOT NULL, http_worker_id text NOT NULL, polled_at timestamptz NOT NULL,
        ended text, ended_at timestamptz, lease_over text)""",
    "CREATE INDEX IF NOT EXISTS leases_gateway ON {schema}.leases (gateway_id, ended_at)",
    """CREATE TABLE IF NOT EXISTS {schema}.poll_data (
        task_type text NOT NULL, domain text NOT NULL, worker_id text NOT NULL,
        last_poll_at timestamptz NOT NULL, PRIMARY KEY (task_type, domain, worker_id))""",
    """CREATE TABLE IF NOT EXISTS {schema}.task_logs (
        task_id text NOT NULL, n bigserial, at text NOT NULL, log text NOT NULL,
        PRIMARY KEY (task_id, n))""",
)

# The per-task statements, run on ``conns.Connections`` (ADR 36), in psycopg's parameter style.
_HANDED = (
    "INSERT INTO leases (task_id, workflow_id, task_type, attempt, lease_epoch, lease_token,"
    " gateway_id, http_worker_id, polled_at)"
    " SELECT t, wf, tt, at, e, tok, %(g)s, %(w)s, %(now)s FROM unnest(%(task_id)s::text[],"
    " %(workflow_id)s::text[], %(task_type)s::text[], %(attempt)s::int[], %(lease_epoch)s::int[],"
    " %(lease_token)s::text[]) AS r(t, wf, tt, at, e, tok)"
    " ON CONFLICT (task_id) DO UPDATE SET workflow_id = excluded.workflow_id,"
    " attempt = excluded.attempt, lease_epoch = excluded.lease_epoch,"
    " lease_token = excluded.lease_token, gateway_id = excluded.gateway_id,"
    " http_worker_id = excluded.http_worker_id, polled_at = excluded.polled_at, ended = NULL,"
    " ended_at = NULL, lease_over = NULL"
)
_END = (
    "WITH marked AS (UPDATE leases SET ended = %(o)s, ended_at = %(now)s"
    " WHERE task_id = %(t)s AND workflow_id = %(wf)s AND (%(w)s = '' OR http_worker_id = %(w)s)"
    " AND lease_over IS NULL AND ended IS NULL RETURNING task_id)"
    " SELECT task_id, workflow_id, task_type, attempt, lease_epoch, lease_token,"
    " gateway_id, http_worker_id, ended, lease_over,"
    " (SELECT count(*) FROM marked) AS marked"
    " FROM leases WHERE task_id = %(t)s"
)


def _now() -> datetime:
    return datetime.now(UTC)


class GatewayStore:
    def __init__(self, settings: Settings) -> None:
        self.schema = f"{settings.postgres.schema_name}_gateway"
        # Sized like the API's read-model pool, without overflow: every poll and update takes
        # a connection, and an overflow one is closed on return, so a small pool with overflow
        # made most updates pay a connect under a few HTTP workers (bench/api_workers.py's
        # profile).
        a = settings.api
        self.engine: Engine = engine_for(settings, self.schema, a.pg_pool_size, a.pg_max_overflow)
        # The per-task statements bypass SQLAlchemy (``conns``): no pre-ping, no BEGIN/COMMIT.
        self._hot = Connections(settings.postgres.libpq_dsn, self.schema, a.pg_pool_size)
        self._ready = False

    def ensure(self) -> None:
        if self._ready:
            return
        with available("gateway"), self.engine.begin() as conn:
            conn.execute(text("SELECT pg_advisory_xact_lock(hashtext(:s))"), {"s": self.schema})
            for ddl in _DDL:
                conn.execute(text(ddl.format(schema=self.schema)))
        self._ready = True

    def handed(self, gateway_id: str, http_worker_id: str, tasks: list[wire.Assignment]) -> None:
        """The poll hands ``tasks`` to ``http_worker_id``: written before it answers (one
        statement for the poll's rows)."""
        self.ensure()
        if not tasks:
            return
        columns = {
            "task_id": [a.task_id for a in tasks],
            "workflow_id": [a.workflow_id for a in tasks],
            "task_type": [a.task_type for a in tasks],
            "attempt": [a.attempt for a in tasks],
            "lease_epoch": [a.lease_epoch for a in tasks],
            "lease_token": [a.lease_token for a in tasks],
        }
        self._hot.execute(_HANDED, {**columns, "g": gateway_id, "w": http_worker_id, "now": _now()})

    def taken_by(self, gateway_id: str) -> list[HeldLease]:
        """The tasks HTTP workers took from ``gateway_id`` that have not ended."""
        self.ensure()
        with available("gateway"), self.engine.connect() as conn:
            rows = conn.execute(
                text(
                    "SELECT task_id, workflow_id, task_type, attempt, lease_epoch, lease_token,"
                    " gateway_id, http_worker_id, ended, lease_over FROM leases"
                    " WHERE gateway_id = :g AND ended IS NULL AND lease_over IS NULL"
                ),
                {"g": gateway_id},
            ).mappings()
            return [HeldLease(**dict(r)) for r in rows]

    def lease(self, task_id: str) -> HeldLease | None:
        self.ensure()
        with available("gateway"), self.engine.connect() as conn:
            row = (
                conn.execute(
                    text(
                        "SELECT task_id, workflow_id, task_type, attempt, lease_epoch, lease_token,"
                        " gateway_id, http_worker_id, ended, lease_over"
                        " FROM leases WHERE task_id = :t"
                    ),
                    {"t": task_id},
                )
                .mappings()
                .first()
            )
        return HeldLease(**dict(row)) if row else None

    def end(
        self, task_id: str, workflow_id: str, http_worker_id: str, outcome: str
    ) -> tuple[HeldLease | None, str | None]:
        """The lease as it was, and its first outcome: ``outcome`` recorded now when the lease
        is the caller's (its workflow, its HTTP worker or none given, not ended by the
        dispatcher) and had none, the earlier one when it had, None when it is not the caller's.

        One statement, one round trip: the update's condition is the ownership check, and the
        SELECT beside it sees the row as it was before (a data-modifying WITH's snapshot).
        """
        self.ensure()
        params = {"o": outcome, "now": _now(), "t": task_id, "wf": workflow_id, "w": http_worker_id}
        found = self._hot.fetch_one(_END, params)
        if found is None:
            return None, None
        marked = found.pop("marked")
        lease = HeldLease(**found)
        return lease, outcome if marked else lease.ended

    def lease_over(self, task_id: str, lease_epoch: int, reason: str) -> None:
        self.ensure()
        with available("gateway"), self.engine.begin() as conn:
            conn.execute(
                text("UPDATE leases SET lease_over = :r WHERE task_id = :t AND lease_epoch <= :e"),
                {"r": reason, "t": task_id, "e": lease_epoch},
            )

    def ended_of(self, gateway_id: str, task_ids: list[str]) -> set[str]:
        """Which of these tasks, held by ``gateway_id``, some API process reported ended;
        ended rows older than ``KEEP_ENDED`` are deleted on the way."""
        self.ensure()
        with available("gateway"), self.engine.begin() as conn:
            conn.execute(
                text(
                    "WITH gone AS (DELETE FROM leases WHERE gateway_id = :g AND ended_at < :old"
                    " RETURNING task_id)"
                    " DELETE FROM task_logs WHERE task_id IN (SELECT task_id FROM gone)"
                ),
                {"g": gateway_id, "old": _now() - KEEP_ENDED},
            )
            if not task_ids:
                return set()
            rows = conn.execute(
                text(
                    "SELECT task_id FROM leases WHERE gateway_id = :g"
                    " AND task_id = ANY(:ids) AND (ended IS NOT NULL OR lease_over IS NOT NULL)"
                ),
                {"g": gateway_id, "ids": task_ids},
            )
            return {str(r[0]) for r in rows}

    def polled(self, task_type: str, domain: str, worker_id: str) -> None:
        self.ensure()
        with available("gateway"), self.engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO poll_data VALUES (:t, :d, :w, :now)"
                    " ON CONFLICT (task_type, domain, worker_id)"
                    " DO UPDATE SET last_poll_at = excluded.last_poll_at"
                ),
                {"t": task_type, "d": domain, "w": worker_id, "now": _now()},
            )

    def poll_data(self, task_type: str) -> list[dict[str, Any]]:
        self.ensure()
        with available("gateway"), self.engine.connect() as conn:
            rows = conn.execute(
                text(
                    "SELECT task_type, domain, worker_id, last_poll_at"
                    " FROM poll_data WHERE task_type = :t ORDER BY worker_id"
                ),
                {"t": task_type},
            ).mappings()
            return [dict(r) for r in rows]

    def add_logs(self, task_id: str, lines: list[dict[str, Any]]) -> None:
        self.ensure()
        if not lines:
            return
        with available("gateway"), self.engine.begin() as conn:
            conn.execute(
                text("INSERT INTO task_logs (task_id, at, log) VALUES (:t, :at, :log)"),
                [{"t": task_id, "at": x["at"], "log": x["log"]} for x in lines],
            )

    def logs(self, task_id: str) -> list[dict[str, Any]]:
        self.ensure()
        with available("gateway"), self.engine.connect() as conn:
            rows = conn.execute(
                text("SELECT at, log FROM task_logs WHERE task_id = :t ORDER BY n"),
                {"t": task_id},
            ).mappings()
            return [dict(r) for r in rows]

    def close(self) -> None:
        self._hot.close()
        self.engine.dispose()
