"""``es-sched workers``: the blacklistings in force, and an operator's lift (ADR 58); worker
versions stopped or rolled out by failure rate, and an operator's revert (ADR 70).

``blacklist`` folds the config topic's ``blacklist:<worker>`` records (what every dispatcher
applies) and prints each one in force with the failures that caused it; ``lift WORKER`` writes
the lift record, which every dispatcher applies within a tick. The same records as
``POST /api/v1/workers/{id}/lift`` and the console's Lift button.

``versions`` prints the rollouts, version stops and rules; ``rollout TYPE`` starts a gradual
rollout, ``revert-rollout TYPE`` undoes its promotion or stop, ``lift-version TYPE VERSION``
lifts a stop, and ``version-rule TYPE`` sets the failure rate that stops a version: the same
records as ``POST /api/v1/workers/rollouts...`` and the console's buttons.
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
from es_sched.versions import Rollout, Rule, Versions, subject, versions_of


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
    """Workers' blacklistings and worker versions: show them, lift or revert one."""


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


def _versions(settings: Settings) -> Versions:
    return versions_of(current(settings))


def _who(by: str | None) -> str:
    return by or f"cli:{getpass.getuser()}"


@workers.command("versions")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def versions(as_json: bool) -> None:
    """Rollouts, version stops and rules, with the failure rates that decided them."""
    v = _versions(_settings())
    if as_json:
        doc = {
            "rollouts": {t: r.as_record() for t, r in sorted(v.rollouts.items())},
            "stops": {subject(*k): x.as_record() for k, x in sorted(v.stops.items())},
            "rules": {t: r.as_record() for t, r in sorted(v.rules.items())},
        }
        click.echo(json.dumps(doc, indent=2, sort_keys=True))
        return
    if not (v.rollouts or v.stops or v.rules):
        click.echo("(no rollout, version stop or rule)")
    for t, r in sorted(v.rollouts.items()):
        click.echo(
            f"rollout {t}: {r.candidate} vs {r.current}  {r.state}  given {r.given:.0%} "
            f"(share {r.share:.0%})  by {r.by} at {r.at.isoformat()}  {r.why}"
        )
    for (t, version), x in sorted(v.stops.items()):
        click.echo(f"stop {t} {version}: {x.state} by {x.by} at {x.at.isoformat()}  {x.why}")
    for t, rule in sorted(v.rules.items()):
        click.echo(f"rule {t}: over {rule.max_failure_rate:.0%} after {rule.min_samples}")


@workers.command("rollout")
@click.argument("task_type")
@click.option("--candidate", required=True, help="The new worker version.")
@click.option("--current", required=True, help="The version it is compared with.")
@click.option("--share", type=click.FloatRange(0, 1, min_open=True), required=True)
@click.option("--margin", type=click.FloatRange(0, 1), default=0.05, show_default=True)
@click.option("--min-samples", type=click.IntRange(1), default=20, show_default=True)
@click.option("--by", default=None, help="Who starts it (default: the local user).")
def rollout(
    task_type: str,
    candidate: str,
    current: str,
    share: float,
    margin: float,
    min_samples: int,
    by: str | None,
) -> None:
    """Give CANDIDATE a share of TASK_TYPE's tasks until its failure rate decides."""
    now = datetime.now(UTC)
    try:
        r = Rollout(
            task_type, candidate, current, share, margin, min_samples, "rolling", now, _who(by)
        )
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    publish(_settings(), config_records.key_for("rollout", task_type), r.as_record())
    click.echo(f"rolling out {candidate} for {task_type} at {share:.0%} against {current}")


@workers.command("revert-rollout")
@click.argument("task_type")
@click.option("--by", default=None, help="Who reverts it (default: the local user).")
def revert_rollout(task_type: str, by: str | None) -> None:
    """Undo the promotion or stop of TASK_TYPE's rollout: rolling again at its share."""
    settings = _settings()
    found = _versions(settings).rollouts.get(task_type)
    if found is None or found.state == "rolling":
        click.echo(f"no decided rollout for {task_type}", err=True)
        sys.exit(1)
    back = found.revert(datetime.now(UTC), _who(by))
    publish(settings, config_records.key_for("rollout", task_type), back.as_record())
    click.echo(f"reverted the {found.state} rollout of {found.candidate} for {task_type}")


@workers.command("lift-version")
@click.argument("task_type")
@click.argument("version")
@click.option("--by", default=None, help="Who lifts it (default: the local user).")
def lift_version(task_type: str, version: str, by: str | None) -> None:
    """End VERSION's stop for TASK_TYPE now."""
    settings = _settings()
    found = _versions(settings).stops.get((task_type, version))
    if found is None or not found.in_force:
        click.echo(f"version {version} is not stopped for {task_type}", err=True)
        sys.exit(1)
    done = found.lifted(datetime.now(UTC), _who(by))
    key = config_records.key_for("version-stop", subject(task_type, version))
    publish(settings, key, done.as_record())
    click.echo(f"lifted the stop of {version} for {task_type}")


@workers.command("version-rule")
@click.argument("task_type")
@click.option("--max-failure-rate", type=click.FloatRange(0, 1), default=None)
@click.option("--min-samples", type=click.IntRange(1), default=20, show_default=True)
@click.option("--remove", is_flag=True, help="Remove the rule.")
def version_rule(
    task_type: str, max_failure_rate: float | None, min_samples: int, remove: bool
) -> None:
    """Stop a version for TASK_TYPE (* for any) when it fails more than --max-failure-rate."""
    key = config_records.key_for("version-rule", task_type)
    if remove:
        publish(_settings(), key, None)
        click.echo(f"removed the version rule for {task_type}")
        return
    if max_failure_rate is None:
        raise click.UsageError("--max-failure-rate is needed (or --remove)")
    publish(_settings(), key, Rule(task_type, max_failure_rate, min_samples).as_record())
    click.echo(f"versions of {task_type} stop over {max_failure_rate:.0%} failures")
