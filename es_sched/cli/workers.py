"""``es-sched workers``: the blacklistings in force, and an operator's lift (ADR 58).

``blacklist`` folds the config topic's ``blacklist:<worker>`` records (what every dispatcher
applies) and prints each one in force with the failures that caused it; ``lift WORKER`` writes
the lift record, which every dispatcher applies within a tick. The same records as
``POST /api/v1/workers/{id}/lift`` and the console's Lift button.
"""

from __future__ import annotations

import getpass
import json
import sys
from datetime import UTC, datetime

import click

from es_sched.blacklist import Blacklisting, Lifted, of_record
from es_sched.cli.config import _settings
from es_sched.kafka.config_client import current, publish
from es_sched.serialization import config as config_records
from es_sched.settings import Settings


def in_force(settings: Settings, now: datetime) -> dict[str, Blacklisting]:
    found: dict[str, Blacklisting] = {}
    for key, value in current(settings).items():
        if not key.startswith("blacklist:") or "unreadable" in value:
            continue
        b = of_record(key.removeprefix("blacklist:"), value)
        if isinstance(b, Blacklisting) and b.active(now):
            found[b.worker_id] = b
    return found


@click.group("workers")
def workers() -> None:
    """Workers' blacklistings: show them, lift one."""


@workers.command("blacklist")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def blacklist(as_json: bool) -> None:
    """The blacklistings in force, with the failures that caused each."""
    found = in_force(_settings(), datetime.now(UTC))
    if as_json:
        doc = {w: b.as_record() for w, b in sorted(found.items())}
        click.echo(json.dumps(doc, indent=2, sort_keys=True))
        return
    if not found:
        click.echo("(no worker is blacklisted)")
    for worker_id, b in sorted(found.items()):
        click.echo(f"{worker_id}  pool {b.pool}  until {b.until.isoformat()}  {b.why}")
        for f in b.failures:
            click.echo(f"  {f.at.isoformat()}  {f.fault}  {f.task_id}: {f.reason}")


@workers.command("lift")
@click.argument("worker_id")
@click.option("--by", default=None, help="Who lifts it (default: the local user).")
def lift(worker_id: str, by: str | None) -> None:
    """End WORKER_ID's blacklisting now."""
    settings, now = _settings(), datetime.now(UTC)
    if worker_id not in in_force(settings, now):
        click.echo(f"worker {worker_id} is not blacklisted", err=True)
        sys.exit(1)
    done = Lifted(worker_id, now, by or f"cli:{getpass.getuser()}")
    publish(settings, config_records.key_for("blacklist", worker_id), done.as_record())
    click.echo(f"lifted the blacklisting of {worker_id}")
