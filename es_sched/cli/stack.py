"""``es-sched stack up|down|status``: the services es-sched needs, run here or by compose."""

from __future__ import annotations

import json
import sys
import time

import click
from rich.console import Console
from rich.table import Table

from es_sched.errors import ConfigError
from es_sched.settings import Settings, load_settings
from es_sched.stack import ROLES, Role, ServiceStatus, Stack

# Piped output (CI logs, `| less`) gets a fixed width instead of rich's 80-column fallback.
err = Console(stderr=True, width=None if sys.stderr.isatty() else 120)
out = Console(width=None if sys.stdout.isatty() else 120)


def _settings() -> Settings:
    try:
        return load_settings()
    except ConfigError as exc:
        err.print(f"[red]configuration error:[/] {exc}")
        sys.exit(2)


def _roles(only: str | None) -> tuple[Role, ...]:
    if not only:
        return ROLES
    picked = tuple(r.strip() for r in only.split(",") if r.strip())
    unknown = [r for r in picked if r not in ROLES]
    if unknown:
        raise click.BadParameter(f"unknown service {unknown}; choose from {', '.join(ROLES)}")
    return tuple(r for r in ROLES if r in picked)


def _report(role: str, message: str) -> None:
    err.print(f"[bold cyan]{role:>8}[/] {message}")


def _status_table(statuses: list[ServiceStatus]) -> Table:
    table = Table(title="es-sched stack")
    for col in ("service", "endpoint", "healthy", "managed", "pid", "MiB"):
        table.add_column(col, no_wrap=True)
    table.add_column("detail", overflow="fold")
    for s in statuses:
        table.add_row(
            s.service,
            s.endpoint,
            "[green]yes[/]" if s.healthy else "[red]no[/]",
            s.managed,
            str(s.pid or ""),
            f"{s.memory_mb:.0f}" if s.memory_mb is not None else "",
            s.detail,
        )
    return table


@click.group()
def stack() -> None:
    """Run the services es-sched needs: Kafka, PostgreSQL and OpenSearch/Elasticsearch."""


ONLY = click.option("--only", help="Comma-separated subset of kafka,postgres,search.")


@stack.command("up")
@ONLY
@click.option(
    "--kafka-brokers",
    type=click.IntRange(1, 5),
    default=None,
    help="Run Kafka as this many KRaft nodes (3: replication 3, min.insync.replicas 2); "
    "default ES_SCHED_STACK_KAFKA_BROKERS (1), or the size the state folder was formatted as.",
)
def stack_up(only: str | None, kafka_brokers: int | None) -> None:
    """Install (first time) and start the stack; waits until every service is ready."""
    started = time.monotonic()
    stack_ = Stack(_settings(), _roles(only), kafka_brokers)
    statuses = stack_.up(report=_report)
    _report("stack", f"up in {time.monotonic() - started:.1f}s")
    kafka = [s.endpoint for s in statuses if s.role == "kafka"]
    if len(kafka) > 1:
        _report(
            "kafka",
            f"{len(kafka)} brokers: ES_SCHED_KAFKA_BOOTSTRAP_SERVERS="
            f"{','.join(e.split(',')[0] for e in kafka)}",
        )
    out.print(_status_table(statuses))
    if not all(s.healthy for s in statuses):
        sys.exit(1)


@stack.command("down")
@ONLY
def stack_down(only: str | None) -> None:
    """Stop exactly the processes this state folder started."""
    Stack(_settings(), _roles(only)).down(report=_report)


@stack.command("status")
@ONLY
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def stack_status(only: str | None, as_json: bool) -> None:
    """Probe every service; exit 1 when one is not healthy."""
    stack_ = Stack(_settings(), _roles(only))
    statuses = stack_.status()
    if as_json:
        doc: dict[str, object] = {"mode": stack_.mode()}
        doc.update({s.key: s.as_json() for s in statuses})
        click.echo(json.dumps(doc, indent=2))
    else:
        out.print(_status_table(statuses))
    if not all(s.healthy for s in statuses):
        sys.exit(1)
