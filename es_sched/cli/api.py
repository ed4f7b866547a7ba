"""``es-sched api``: serve the HTTP API and console; ``es-sched api keys ...``: its API keys."""

from __future__ import annotations

import getpass
import json
import logging
import signal
import threading
from types import FrameType

import click

from es_sched import bootstrap
from es_sched.settings import load_settings


@click.group("api", invoke_without_command=True)
@click.option("--host", default=None, help="Listen here (default: ES_SCHED_API_HOST).")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=None,
    help="Listen on this port (default: ES_SCHED_API_PORT, 8080).",
)
@click.option(
    "--workers",
    type=click.IntRange(1, 64),
    default=None,
    help="Processes serving the port, one per core (default: ES_SCHED_API_WORKERS, 1).",
)
@click.option("--log-level", default="INFO", show_default=True)
@click.pass_context
def api(
    ctx: click.Context, host: str | None, port: int | None, workers: int | None, log_level: str
) -> None:
    """Serve the Conductor-compatible REST API (/api), the native API (/api/v1) and the
    console (/ui) until SIGINT or SIGTERM."""
    if ctx.invoked_subcommand is not None:
        return
    from es_sched.api.app import create_app  # noqa: PLC0415 (FastAPI only for this command)
    from es_sched.api.server import ApiServer, serve_workers  # noqa: PLC0415

    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    settings = bootstrap.as_principal(load_settings(), "api")
    if host is not None:
        settings = bootstrap.with_api_host(settings, host)
    workers = settings.api.workers if workers is None else workers
    if workers > 1:
        serve_workers(settings.api, workers, port)
        return
    stop = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    svc = bootstrap.api_services(settings)
    bootstrap.announce_api(settings, svc)
    ApiServer(settings.api, create_app(svc), port=port).run(stop)


@api.group("keys")
def keys() -> None:
    """API keys: create (the secret is shown once), list, revoke (ADR 25)."""


@keys.command("create")
@click.option("--role", required=True, type=click.Choice(["viewer", "worker", "operator", "admin"]))
@click.option("--name", default="", help="A label for people (default: the key id).")
@click.option("--json", "as_json", is_flag=True, help="Print {keyId, keySecret, role} as JSON.")
def keys_create(role: str, name: str, as_json: bool) -> None:
    """Create a key; prints its id and secret, which is not stored and not shown again."""
    from es_sched.api.keys import new_key, utcnow  # noqa: PLC0415

    key, secret = new_key(role, name, _operator(), utcnow())
    store = bootstrap.key_store(load_settings())
    try:
        store.add(key)
    finally:
        store.close()
    if as_json:
        click.echo(json.dumps({"keyId": key.key_id, "keySecret": secret, "role": key.role}))
        return
    click.echo(f"key id:     {key.key_id}\nkey secret: {secret}\nrole:       {key.role}")
    click.echo("The secret is shown only now; store it (it is kept only as a hash).", err=True)


@keys.command("list")
@click.option("--json", "as_json", is_flag=True)
def keys_list(as_json: bool) -> None:
    """Every key, revoked ones included, without secrets."""
    store = bootstrap.key_store(load_settings())
    try:
        rows = [key.as_row() for key in store.all()]
    finally:
        store.close()
    if as_json:
        click.echo(json.dumps(rows))
        return
    for row in rows:
        state = f"revoked {row['revoked_at']}" if row["revoked_at"] else "active"
        click.echo(
            f"{row['key_id']}  {row['role']:<8}  {row['name']}  created {row['created_at']} "
            f"by {row['created_by']}  last used {row['last_used_at'] or '-'}  {state}"
        )


@keys.command("revoke")
@click.argument("key_id")
def keys_revoke(key_id: str) -> None:
    """Revoke a key: no new tokens, and its tokens stop working within
    ES_SCHED_API_KEY_CACHE_S seconds."""
    from es_sched.api.keys import utcnow  # noqa: PLC0415

    store = bootstrap.key_store(load_settings())
    try:
        found = store.revoke(key_id, utcnow())
    finally:
        store.close()
    if not found:
        raise click.ClickException(f"no key {key_id!r}")
    click.echo(f"revoked {key_id}")


def _operator() -> str:
    """Who created a key: the OS user running the CLI (the CLI has no other identity)."""
    try:
        return f"cli:{getpass.getuser()}"
    except (KeyError, OSError):
        return "cli"
