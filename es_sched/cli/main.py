"""The ``es-sched`` command line: the root group, each command imported only when it runs.

Every command loads and validates settings once, and turns any ``EsSchedError`` into a one-line
message on stderr and exit status 1 (2 for bad settings), never a traceback.
"""

from __future__ import annotations

import click

from es_sched.cli.entry import invoke
from es_sched.cli.lazy import LazyGroup

# Each command and the module it is in (``LazyGroup``): a call imports its own command only.
COMMANDS = {
    "stack": "es_sched.cli.stack:stack",
    "defs": "es_sched.cli.defs:defs",
    "run": "es_sched.cli.run:run",
    "api": "es_sched.cli.api:api",
    **{
        name: f"es_sched.cli.commands:{name}"
        for name in (
            "submit",
            "cancel",
            "terminate",
            "retry",
            "pause",
            "resume",
            "signal",
            "restart",
            "rerun",
        )
    },
    "config": "es_sched.cli.config:config",
    **{name: f"es_sched.cli.read:{name}" for name in ("status", "query", "search", "history")},
    "demo": "es_sched.cli.demo.command:demo_command",
    "replay": "es_sched.cli.audit:replay",
    "audit": "es_sched.cli.audit:audit_group",
    "projections": "es_sched.cli.audit:projections",
    "worker": "es_sched.cli.worker:worker",
    "workers": "es_sched.cli.workers:workers",
    "stats": "es_sched.cli.stats:stats",
}


@click.group(cls=LazyGroup, lazy=COMMANDS)
@click.version_option(package_name="es-sched")
def cli() -> None:
    """es-sched: an event-sourced DAG task scheduler for media pipelines over Kafka."""


def main() -> None:
    invoke(cli)
