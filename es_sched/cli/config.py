"""``es-sched config``: the dispatcher's run-time limits, as records on the compacted config topic.

Each command validates its record with the same parser the dispatcher uses
(``es_sched.dispatch.config``) and produces it through ``es_sched.kafka.config_client``;
running dispatchers apply it within a tick. ``show`` folds the topic into the current settings.
``register(cli)`` attaches the group to the CLI.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from es_sched.dispatch import config as dc
from es_sched.errors import ConfigError
from es_sched.kafka.config_client import current, publish
from es_sched.settings import Settings, load_settings


def _settings() -> Settings:
    try:
        return load_settings()
    except ConfigError as exc:
        click.echo(f"configuration error: {exc}", err=True)
        sys.exit(2)


def _set(key: str, value: dict[str, Any] | None) -> None:
    publish(_settings(), key, value)
    click.echo(f"{key} = {json.dumps(value) if value is not None else '(removed)'}")


@click.group("config")
def config() -> None:
    """Dispatcher limits, bans, pools and placement policies, changed at run time."""


@config.command("set-rate")
@click.option("--type", "task_type", help="Limit this task type.")
@click.option("--tenant", help="Limit this tenant.")
@click.option("--key", "rate_limit_key", help="Limit this rate-limit key (across task types).")
@click.argument("rate", type=float)
@click.option("--burst", type=float, help="Tokens saved up at most (default: max(1, RATE)).")
def set_rate(
    task_type: str | None,
    tenant: str | None,
    rate_limit_key: str | None,
    rate: float,
    burst: float | None,
) -> None:
    """At most RATE tasks per second of a task type, a tenant or a rate-limit key."""
    given = {"type": task_type, "tenant": tenant, "key": rate_limit_key}
    chosen = [(scope, subject) for scope, subject in given.items() if subject is not None]
    if len(chosen) != 1:
        raise click.UsageError("give exactly one of --type, --tenant and --key")
    value: dict[str, Any] = {"rate": rate}
    if burst is not None:
        value["burst"] = burst
    scope, subject = chosen[0]
    _set(dc.rate_key(subject, scope=scope), value)


@config.command("set-concurrency")
@click.argument("task_type")
@click.argument("limit", type=click.IntRange(min=0))
def set_concurrency(task_type: str, limit: int) -> None:
    """At most LIMIT tasks of TASK_TYPE in flight."""
    _set(dc.key_for("concurrency", task_type), {"limit": limit})


@config.command("set-tenant")
@click.argument("tenant")
@click.option("--weight", type=click.FloatRange(min=0, min_open=True), help="Fair share (1).")
@click.option("--quota", type=click.IntRange(min=0), help="At most this many tasks in flight.")
def set_tenant(tenant: str, weight: float | None, quota: int | None) -> None:
    """TENANT's fair share within a level and its concurrency quota (ADR 68)."""
    value: dict[str, Any] = {}
    if weight is not None:
        value["weight"] = weight
    if quota is not None:
        value["quota"] = quota
    _set(dc.key_for("tenant", tenant), value)


@config.command("ban-version")
@click.argument("version")
def ban_version(version: str) -> None:
    """Workers of VERSION get no new tasks."""
    _set(dc.key_for("ban-version", version), {})


@config.command("unban-version")
@click.argument("version")
def unban_version(version: str) -> None:
    """Lift a ban on VERSION."""
    _set(dc.key_for("ban-version", version), None)


@config.command("set-pool")
@click.argument("task_type")
@click.argument("pool")
def set_pool(task_type: str, pool: str) -> None:
    """Run TASK_TYPE on the workers of POOL."""
    _set(dc.key_for("pool", task_type), {"pool": pool})


@config.command("set-policy")
@click.argument("pool")
@click.argument("policy", type=click.Choice(dc.POLICIES))
def set_policy(pool: str, policy: str) -> None:
    """Place the tasks of POOL by binpack (tightest fit) or spread (loosest)."""
    _set(dc.key_for("policy", pool), {"policy": policy})


@config.command("show")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def show(as_json: bool) -> None:
    """The settings in force, from the config topic."""
    settings = current(_settings())
    if as_json:
        click.echo(json.dumps(settings, indent=2, sort_keys=True))
        return
    if not settings:
        click.echo("(no run-time config)")
    for key in sorted(settings):
        click.echo(f"{key}  {json.dumps(settings[key], sort_keys=True)}")
