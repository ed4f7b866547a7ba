"""The root group imports each command only when it runs (``cli.lazy.LazyGroup``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import click
import pytest

from es_sched.cli.main import COMMANDS, cli

pytestmark = pytest.mark.unit
EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "media_pipeline.json"


def test_every_command_is_found_under_its_own_name() -> None:
    ctx = click.Context(cli)
    assert cli.list_commands(ctx) == sorted(COMMANDS)
    for name in COMMANDS:
        command = cli.get_command(ctx, name)
        assert isinstance(command, click.Command) and command.name == name, name
    defs = cli.get_command(ctx, "defs")
    assert isinstance(defs, click.Group)
    assert defs.list_commands(ctx) == ["push", "simulate", "validate"]
    assert defs.get_command(ctx, "push") is not None


def test_a_command_imports_its_own_module_not_the_others() -> None:
    probe = (
        "import sys\n"
        "from es_sched.cli.main import cli\n"
        f"cli.main(['defs', 'validate', {str(EXAMPLE)!r}], standalone_mode=False)\n"
        "import json\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('es_sched.cli.'))))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    )
    loaded = set(json.loads(done.stdout.splitlines()[-1]))
    assert "es_sched.cli.defs" in loaded
    others = {m.split(":")[0] for m in COMMANDS.values()} - {"es_sched.cli.defs"}
    assert not loaded & others, loaded & others
