"""Queries for people: ``status``, ``query workflows``, ``search`` (the read models) and
``history`` (the log itself).

``status`` and ``query`` read PostgreSQL and say which events offsets they reflect; with
``--after TOKEN`` (from ``submit --json``) they first wait until the projection holds that
command's events (read-your-writes). ``search`` is full text over the search indices.
``history`` reads the workflow's events from its partition of the events topic, in order.
"""

from __future__ import annotations

import sys
from datetime import datetime
from typing import Any

import click
import orjson
from rich.console import Console
from rich.table import Table

from es_sched import bootstrap
from es_sched.kafka.clients import read_partition
from es_sched.kafka.connection import connection
from es_sched.kafka.partitioner import partition_for
from es_sched.kafka.topics import topics_for
from es_sched.projections.postgres import queries as pg_queries
from es_sched.projections.postgres.store import PgStore
from es_sched.projections.read_your_writes import Token, wait_projected
from es_sched.serialization import decode_logged_event, event_to_dict
from es_sched.settings import Settings, load_settings

out = Console()


def _json(value: Any) -> None:
    options = orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS
    click.echo(orjson.dumps(value, option=options, default=str).decode())


def _when(value: Any) -> str:
    return value.isoformat(timespec="seconds") if isinstance(value, datetime) else ""


def _fresh(settings: Settings, store: PgStore, after: str | None, wait_s: float) -> None:
    if after is not None:
        wait_projected(settings, store, Token.parse(after), wait_s)


AFTER = click.option("--after", metavar="TOKEN", help="First wait for this command's events.")
WAIT = click.option("--wait-s", type=float, default=30.0, show_default=True)


@click.command("status")
@click.argument("wf_id")
@AFTER
@WAIT
@click.option("--json", "as_json", is_flag=True)
def status(wf_id: str, after: str | None, wait_s: float, as_json: bool) -> None:
    """The workflow WF_ID and its tasks, from the PostgreSQL projection."""
    settings = load_settings()
    store = bootstrap.pg_store(bootstrap.reader(settings))
    try:
        _fresh(settings, store, after, wait_s)
        wf, tasks = pg_queries.workflow(store.engine, wf_id)
        refusals = [] if wf is not None else pg_queries.rejections(store.engine, wf_id)
        reflects = pg_queries.reflected(store.engine).get(topics_for(settings).events, {})
    finally:
        store.close()
    if wf is None:
        click.echo(f"no workflow {wf_id} in the projection", err=True)
        for r in refusals:  # inputs refused for this id while it had no history (ADR 11)
            click.echo(
                f"refused {r['command_type']} command_id={r['command_id']} at "
                f"{_when(r['occurred_at'])}: {r['reason']}",
                err=True,
            )
        sys.exit(1)
    if as_json:
        _json({"workflow": wf, "tasks": tasks, "reflects": reflects})
        return
    out.print(
        f"[bold]{wf['workflow_id']}[/] {wf['name']} v{wf['def_version']}  [bold]{wf['status']}[/]"
        f"{'  ' + wf['reason'] if wf['reason'] else ''}  version {wf['version']}"
    )
    table = Table("task", "name", "attempt", "status", "worker", "started", "ended", "reason")
    for t in tasks:
        table.add_row(
            t["ref"],
            t["name"],
            str(t["attempt"]),
            t["status"],
            t["worker_id"] or "",
            _when(t["started_at"]),
            _when(t["ended_at"]),
            t["reason"],
        )
    out.print(table)


@click.group("query")
def query() -> None:
    """Query the read models."""


@query.command("workflows")
@click.option("--status", "status_")
@click.option("--def", "name")
@click.option("--tenant")
@click.option(
    "--since", type=click.DateTime(["%Y-%m-%d", "%Y-%m-%dT%H:%M:%S%z", "%Y-%m-%dT%H:%M:%S"])
)
@click.option("--limit", type=int, default=50, show_default=True)
@click.option("--count", "count_only", is_flag=True, help="Counts by status only.")
@AFTER
@WAIT
@click.option("--json", "as_json", is_flag=True)
def query_workflows(
    status_: str | None,
    name: str | None,
    tenant: str | None,
    since: datetime | None,
    limit: int,
    count_only: bool,
    after: str | None,
    wait_s: float,
    as_json: bool,
) -> None:
    """Workflows by status, definition, tenant and start time (newest first)."""
    settings = load_settings()
    store = bootstrap.pg_store(bootstrap.reader(settings))
    if since is not None and since.tzinfo is None:
        since = since.astimezone()
    try:
        _fresh(settings, store, after, wait_s)
        if count_only:
            counts = pg_queries.count_workflows(store.engine, status_, name, tenant, since)
            _json(counts) if as_json else out.print(counts)
            return
        rows = pg_queries.workflows(store.engine, status_, name, tenant, since, limit)
        reflects = pg_queries.reflected(store.engine).get(topics_for(settings).events, {})
    finally:
        store.close()
    if as_json:
        _json({"workflows": rows, "reflects": reflects})
        return
    table = Table("workflow", "definition", "tenant", "status", "created", "ended", "reason")
    for r in rows:
        table.add_row(
            r["workflow_id"],
            f"{r['name']} v{r['def_version']}",
            r["tenant"] or "",
            r["status"],
            _when(r["created_at"]),
            _when(r["ended_at"]),
            r["reason"],
        )
    out.print(table)


@click.command("search")
@click.argument("text")
@click.option("--limit", type=int, default=20, show_default=True)
@click.option("--json", "as_json", is_flag=True)
def search(text: str, limit: int, as_json: bool) -> None:
    """Full-text search over workflows and tasks (the search projection)."""
    store = bootstrap.search_store(load_settings())
    try:
        hits = store.search_text(text, limit)
    finally:
        store.close()
    if as_json:
        _json(hits)
        return
    table = Table("kind", "id", "name", "status", "workflow")
    for h in hits:
        table.add_row(
            h.get("kind", ""),
            h.get("task_id") or h.get("workflow_id", ""),
            h.get("name", ""),
            h.get("status", ""),
            h.get("workflow_id", ""),
        )
    out.print(table)


@click.command("history")
@click.argument("wf_id")
@click.option("--json", "as_json", is_flag=True)
def history(wf_id: str, as_json: bool) -> None:
    """Every event of WF_ID from the log, in order."""
    settings = load_settings()
    topic, key = topics_for(settings).events, wf_id.encode()
    part = partition_for(key, settings.kafka.partitions)
    events = [
        decode_logged_event(msg.value() or b"")
        for msg in read_partition(connection(settings.kafka), topic, part)
        if msg.key() == key
    ]
    if not events:
        click.echo(f"no events for {wf_id} in {topic}[{part}]", err=True)
        sys.exit(1)
    if as_json:
        _json([event_to_dict(e) for e in events])
        return
    table = Table("seq", "time", "type", "detail")
    for e in events:
        p = e.payload
        detail = " ".join(
            f"{k}={getattr(p, k)}"
            for k in ("ref", "attempt", "worker_id", "status", "reason")
            if getattr(p, k, None) not in (None, "")
        )
        table.add_row(str(e.seq), _when(e.occurred_at), e.type, detail)
    out.print(table)
