"""Auditors and operators of the projections: ``replay``, ``audit check`` and ``projections
migrate|rebuild``.

``es-sched replay [--until ISO] [--workflow ID] [--verify] [--json]`` folds the events topic
from offset 0 with the decider's core and prints what it found; with ``--verify`` it compares
the result with the PostgreSQL rows, the search documents and the decider's changelog, prints
every mismatch and exits 1 when there is one (2 when a store could not be read).

``es-sched audit check [--prefix P] [--idle] [--json]`` reads the events, commands and
task-results topics and the config topic's blacklistings and checks the invariants I1-I6
(``es_sched.audit``; I4 with
``projections.replay``'s comparison, for each read model that holds a projection caught up
with the log). It prints every violation with its workflow id and offsets and exits 1 when
there is one.
"""

from __future__ import annotations

import dataclasses
import sys
from datetime import datetime
from functools import partial
from typing import Any

import click
import orjson
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from es_sched import bootstrap
from es_sched.audit.check import check as check_log
from es_sched.audit.log import At, Report, Violation
from es_sched.audit.read import read_log
from es_sched.errors import EsSchedError, InfrastructureError
from es_sched.kafka.topics import topics_for
from es_sched.projections import replay as audit
from es_sched.projections.postgres.rebuild import rebuild_pg
from es_sched.projections.verified import replay_verified
from es_sched.settings import Settings, load_settings

err = Console(stderr=True)


@click.command("replay")
@click.option("--until", type=click.DateTime(["%Y-%m-%dT%H:%M:%S%z", "%Y-%m-%dT%H:%M:%S"]))
@click.option("--workflow", "workflow_id")
@click.option("--verify", is_flag=True, help="Compare with the projections and the changelog.")
@click.option(
    "--against",
    type=click.Choice(["pg", "search", "changelog"]),
    multiple=True,
    help="With --verify: only these (default: all three).",
)
@click.option("--json", "as_json", is_flag=True)
def replay(
    until: datetime | None,
    workflow_id: str | None,
    verify: bool,
    against: tuple[str, ...],
    as_json: bool,
) -> None:
    """Fold the log from offset 0 (to --until, for --workflow or all) with the decider's core."""
    settings = load_settings()
    if until is not None and until.tzinfo is None:
        until = until.astimezone()
    report, mismatches = _replay_report(settings, until, workflow_id, against, verify)
    if as_json:
        report["mismatch_list"] = [m.__dict__ for m in mismatches]
        click.echo(
            orjson.dumps(
                report, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS, default=str
            ).decode()
        )
    else:
        for m in mismatches:
            click.echo(m.line())
        click.echo(" ".join(f"{k}={v}" for k, v in report.items()))
    if mismatches:
        sys.exit(1)


def _replay_report(
    settings: Settings,
    until: datetime | None,
    wf: str | None,
    against: tuple[str, ...],
    verify: bool,
) -> tuple[dict[str, Any], list[audit.Mismatch]]:
    """The fold, and with ``verify`` the comparisons, in each partition group's process (ADR
    43): only figures and mismatches come back; ``seconds`` and ``events_per_second`` count
    both."""
    targets = (against or ("pg", "search", "changelog")) if verify else ()
    what = "replaying and comparing" if verify else "replaying the events topic"
    try:
        with Progress(console=err, transient=True) as bar:
            task = bar.add_task(what, total=audit.events_total(settings))
            done = replay_verified(
                settings,
                targets,
                partial(bootstrap.store, settings),
                until,
                wf,
                lambda n: bar.update(task, completed=n),
            )
    except InfrastructureError as exc:
        err.print(f"[red]cannot read the log or a projection:[/] {exc}")
        sys.exit(2)
    mismatches = done.mismatches()
    report: dict[str, Any] = {
        "events": done.events,
        "refusals": done.refusals,
        "workflows": done.workflows,
        "statuses": done.statuses,
        "seconds": round(done.seconds, 3),
        "events_per_second": round(done.events / done.seconds) if done.seconds else None,
    }
    if verify:
        report.update(compared=done.compared, mismatches=len(mismatches))
    return report, mismatches


@click.group("projections")
def projections() -> None:
    """Operate the read models."""


@projections.command("migrate")
def migrate() -> None:
    """Create or upgrade the PostgreSQL read-model schema (Alembic)."""
    settings = load_settings()
    store = bootstrap.pg_store(settings)
    try:
        store.ensure()
    finally:
        store.close()
    click.echo(f"schema {settings.postgres.schema_name} is at the newest revision")


@projections.command("rebuild")
@click.option("--target", type=click.Choice(["pg", "search"]), required=True)
def rebuild(target: str) -> None:
    """Project the log from offset 0 into fresh tables or indices, then switch atomically."""
    settings = load_settings()
    with Progress(console=err) as bar:
        task = bar.add_task(f"rebuilding {target}", total=None)

        def progress(read: int, total: int) -> None:
            bar.update(task, completed=read, total=max(total, read))

        if target == "pg":
            done = rebuild_pg(settings, progress)
        else:
            from es_sched.projections.search.rebuild import rebuild_search  # noqa: PLC0415

            done = rebuild_search(settings, progress)
    table = Table("target", "records", "seconds", "records/s", "retired")
    rate = done.records / done.seconds if done.seconds else 0
    table.add_row(
        done.target, str(done.records), f"{done.seconds:.1f}", f"{rate:.0f}", done.retired
    )
    Console().print(table)


@click.group("audit")
def audit_group() -> None:
    """Check the log (and the read models) against the invariants every fault test ends on."""


@audit_group.command("check")
@click.option("--prefix", help="Topic prefix to check (default: ES_SCHED_KAFKA_TOPIC_PREFIX).")
@click.option(
    "--idle",
    is_flag=True,
    help="The system is idle: a workflow without a terminal event is lost work (I1).",
)
@click.option("--read-models/--no-read-models", default=True, help="I4 (default: when present).")
@click.option("--json", "as_json", is_flag=True)
def check(prefix: str | None, idle: bool, read_models: bool, as_json: bool) -> None:
    """I1 no lost work, I2 seq 1..n once each, I3 one outcome per attempt from the live lease,
    I4 read models equal the fold, I5 decide over the recorded inputs gives the recorded events,
    I6 a blacklisting cites only its worker's own faults."""
    settings = load_settings()
    if prefix:
        kafka = settings.kafka.model_copy(update={"topic_prefix": prefix})
        settings = dataclasses.replace(settings, kafka=kafka)
    with Progress(console=err, transient=True) as bar:
        reading = bar.add_task("reading the log", total=None)
        log = read_log(settings, lambda n: bar.update(reading, completed=n))
        checking = bar.add_task("checking", total=len({e.event.workflow_id for e in log.events}))
        report = check_log(
            log, idle, bootstrap.script_engine(), lambda n: bar.update(checking, completed=n)
        )
    if read_models:
        _read_models(settings, log.events, report)
    if as_json:
        click.echo(orjson.dumps(report.as_dict(), option=orjson.OPT_INDENT_2).decode())
    else:
        for v in report.violations:
            click.echo(v.line())
        for v in report.info:
            err.print(f"[dim]info {v.line()}[/]")
        verdict = "ok" if report.ok else f"{len(report.violations)} violation(s)"
        click.echo(f"{verdict}: " + " ".join(f"{k}={v}" for k, v in report.counts.items()))
    if not report.ok:
        sys.exit(1)


def _read_models(settings: Settings, events: list[Any], report: Report) -> None:
    """I4, with ``replay``'s comparison, for each store that holds a projection of this log
    caught up with it; a store absent, lagging or unreadable is information, not a verdict."""
    topic = topics_for(settings).events
    ends: dict[int, int] = {}
    last: dict[str, At] = {}  # a read model's row is about its workflow's newest event
    for le in events:
        ends[le.at.partition] = max(ends.get(le.at.partition, 0), le.at.offset + 1)
        last[le.event.workflow_id] = max(le.at, last.get(le.event.workflow_id, le.at))
    done = audit.Replayed(states=report.states)
    ids = sorted(report.states)
    for target in ("pg", "search"):
        store = bootstrap.store(settings, target)
        try:
            reflected = audit.projected(store, topic, sorted(ends))
            behind = {p: end for p, end in ends.items() if (reflected or {}).get(p, 0) < end}
            if reflected is None or behind:
                why = (
                    "holds no projection of this log"
                    if reflected is None
                    else (f"is behind the log on partitions {sorted(behind)}")
                )
                report.info.append(Violation("I4", "*", (), f"{target} {why}: not compared"))
                continue
            for m in audit.verify_store(done, store, ids):
                wf = m.id if m.kind == "workflow" else _workflow_of(report, m.id)
                where = (last[wf],) if wf in last else ()
                report.violations.append(Violation("I4", wf, where, m.line()))
            report.counts["I4_compared_" + target] = len(ids)
        except EsSchedError as exc:
            report.info.append(Violation("I4", "*", (), f"{target} not readable: {exc}"[:300]))
        finally:
            store.close()
    report.counts["I4"] = sum(v.invariant == "I4" for v in report.violations)


def _workflow_of(report: Report, task_id: str) -> str:
    return next((wf for wf, st in report.states.items() if task_id in st.tasks), "?")
