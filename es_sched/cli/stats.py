"""``es-sched stats``: what the analytics role proposes, as the roles that use it read it (ADR 64).

Reads the compacted ``<prefix>.stats`` topic from its beginning (a ``StatsView``, no group,
nothing committed) and prints the latest proposal per key: run times, queue waits and failures
per task type and size class, then failure rates per worker, host and version. ``--type``
keeps one task type; ``--json`` prints the records as published.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import click
from rich.console import Console
from rich.table import Table

from es_sched.cli.config import _settings
from es_sched.domain.learned import FailureRate, RunStats, to_record
from es_sched.kafka.connection import connection
from es_sched.kafka.stats import StatsView
from es_sched.kafka.topics import topics_for
from es_sched.settings import Settings

Stats = RunStats | FailureRate


def latest(settings: Settings) -> dict[str, Stats]:
    view = StatsView(connection(settings.kafka), topics_for(settings).stats)
    try:
        return view.all()
    finally:
        view.close()


def _s(value: float) -> str:
    return f"{value:.2f}"


def runtime_table(found: Mapping[str, Stats]) -> Table:
    table = Table(
        "type",
        "size class",
        "runs",
        "P50 s",
        "P95 s",
        "P99 s",
        "wait P50 s",
        "wait P95 s",
        "failed",
        "rate",
        "reasons",
        "window end",
        title="run times",
    )
    for _, s in sorted(found.items()):
        if isinstance(s, RunStats):
            reasons = ", ".join(f"{r} {n}" for r, n in sorted(s.failures_by_reason.items()))
            table.add_row(
                s.task_type,
                s.size_class,
                str(s.samples),
                _s(s.run_p50_s),
                _s(s.run_p95_s),
                _s(s.run_p99_s),
                _s(s.wait_p50_s),
                _s(s.wait_p95_s),
                str(s.failures),
                f"{s.failure_rate:.1%}",
                reasons,
                s.window_end,
            )
    return table


def failure_table(found: Mapping[str, Stats]) -> Table:
    table = Table(
        "by", "type", "subject", "ended", "failed", "rate", "window end", title="failures"
    )
    for _, s in sorted(found.items()):
        if isinstance(s, FailureRate):
            table.add_row(
                s.kind,
                s.task_type,
                s.subject,
                str(s.outcomes),
                str(s.failures),
                f"{s.failure_rate:.1%}",
                s.window_end,
            )
    return table


@click.command("stats")
@click.option("--type", "task_type", default=None, help="Only this task type.")
@click.option("--json", "as_json", is_flag=True, help="The records as published, one a line.")
def stats(task_type: str | None, as_json: bool) -> None:
    """What the analytics role learned: the latest proposals on the stats topic."""
    found = {k: s for k, s in latest(_settings()).items() if task_type in (None, s.task_type)}
    if as_json:
        for key, s in sorted(found.items()):
            click.echo(json.dumps({"key": key, **to_record(s)}))
        return
    if not found:
        click.echo("(no proposals yet: is `es-sched run --role analytics` running?)")
        return
    console = Console()
    console.print(runtime_table(found))
    console.print(failure_table(found))
