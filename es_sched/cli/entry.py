"""How every ``es-sched`` command ends: an ``EsSchedError`` or a click error becomes a one-line
message on stderr and an exit status (1; click's own; 130 when aborted), never a traceback.

Shared by the whole command line (``es_sched.cli.main``) and the role runner's short start path
(``python -m es_sched run``, which imports ``es_sched.cli.run`` alone: ADR 21), so rich, the
heavier of the two, is imported only to print an error.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from es_sched.errors import EsSchedError

if TYPE_CHECKING:
    from rich.console import Console


def console() -> None:
    """The ``es-sched`` console script and ``python -m es_sched``.

    ``run`` takes a short path: only ``es_sched.cli.run`` and the roles it starts are imported,
    not the other commands (the audit, projection, search and PostgreSQL clients, rich tables),
    whose imports were most of a restarted role's start-up (ADR 21).
    """
    if sys.argv[1:2] == ["run"]:
        from es_sched.cli.run import run  # noqa: PLC0415 (the short path's only command)

        sys.argv[1:2] = []
        invoke(run, "es-sched run")
    else:
        from es_sched.cli.main import main  # noqa: PLC0415 (everything else)

        main()


def invoke(command: click.Command, prog_name: str = "es-sched") -> None:
    try:
        command.main(prog_name=prog_name, standalone_mode=False)
    except click.exceptions.Abort:
        _err().print("aborted")
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except EsSchedError as exc:
        _err().print(f"[red]error:[/] {exc}")
        sys.exit(1)


def _err() -> Console:
    from rich.console import Console  # noqa: PLC0415 (only when there is an error to print)

    return Console(stderr=True, width=None if sys.stderr.isatty() else 120)
