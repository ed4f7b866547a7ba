"""``es-sched defs validate|simulate``: definitions checked and dry-run without any service."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from es_sched import bootstrap
from es_sched.cli.lazy import LazyGroup
from es_sched.commands import files
from es_sched.domain.validation import sub_workflow_cycles, validate_workflow
from es_sched.errors import SchemaError
from es_sched.serialization.schemas import default_catalog, schema_dir
from es_sched.simulate import Simulation

out = Console(width=None if sys.stdout.isatty() else 120)


# ``push`` writes to Kafka (``cli.commands``): imported only when it runs (``LazyGroup``).
@click.group(cls=LazyGroup, lazy={"push": "es_sched.cli.commands:push"})
def defs() -> None:
    """Workflow definitions (Conductor format, JSON or YAML)."""


def _schema_problems(doc: dict[str, Any], kind: str) -> list[str]:
    try:
        default_catalog().check(schema_dir() / "definitions" / f"{kind}.v1.json", doc, kind)
    except SchemaError as exc:
        return [str(exc)]
    return []


@defs.command("validate")
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@click.option("--json", "as_json", is_flag=True)
def validate(paths: tuple[Path, ...], as_json: bool) -> None:
    """Check definitions; print every problem with its task; exit 1 when there is one."""
    docs = files.load(paths)
    report: dict[str, list[str]] = {}
    for doc in docs.workflows:
        label = f"{doc.get('name')} v{doc.get('version', 1)} ({docs.sources[id(doc)]})"
        report[label] = _schema_problems(doc, "workflow") + validate_workflow(doc, docs.taskdefs)
    for td in docs.taskdefs:
        problems = _schema_problems(td, "taskdef")
        if problems:
            report[f"taskdef {td.get('name')}"] = problems
    cycles = sub_workflow_cycles({str(d.get("name")): d for d in docs.workflows})
    if cycles:
        report["sub-workflow graph"] = cycles
    bad = any(report.values())
    if as_json:
        click.echo(json.dumps({"valid": not bad, "problems": report}, indent=2))
    else:
        for label, problems in report.items():
            mark = "[red]invalid[/]" if problems else "[green]valid[/]"
            out.print(f"{mark} {label}")
            for p in problems:
                out.print(f"    - {p}")
    if bad:
        sys.exit(1)


@defs.command("simulate")
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@click.option(
    "--taskdefs", "taskdef_paths", multiple=True, type=click.Path(exists=True, path_type=Path)
)
@click.option("--input", "input_json", default="{}", help="The workflow input as JSON.")
@click.option(
    "--script",
    "script_path",
    type=click.Path(exists=True, path_type=Path),
    help="Worker actions (JSON list).",
)
@click.option("--json", "as_json", is_flag=True)
def simulate(
    paths: tuple[Path, ...],
    taskdef_paths: tuple[Path, ...],
    input_json: str,
    script_path: Path | None,
    as_json: bool,
) -> None:
    """Run the first definition with a scripted worker and a virtual clock."""
    docs = files.load(paths, taskdef_paths)
    if not docs.workflows:
        raise SchemaError("no workflow definition in the given files")
    try:
        workflow_input = json.loads(input_json)
    except json.JSONDecodeError as exc:
        raise SchemaError(f"--input is not JSON: {exc}") from None
    script = files.read_any(script_path) if script_path else []
    if not isinstance(script, list):
        raise SchemaError(f"{script_path}: a script is a JSON list of worker actions")
    sim = Simulation(docs.workflows, docs.taskdefs, script, scripts=bootstrap.script_engine())
    result = sim.run(docs.workflows[0], workflow_input)
    if as_json:
        click.echo(json.dumps(result, indent=2, default=str))
        return
    _print(result, "")


def _print(result: dict[str, Any], indent: str) -> None:
    table = Table(title=f"{indent}{result['workflowId']}: {result['status']}")
    for col in ("#", "taskReferenceName", "taskType", "status", "attempt"):
        table.add_column(col)
    for i, t in enumerate(result["tasks"], 1):
        table.add_row(str(i), t["taskReferenceName"], t["taskType"], t["status"], str(t["attempt"]))
    out.print(table)
    if result.get("reasonForIncompletion"):
        out.print(f"{indent}reason: {result['reasonForIncompletion']}")
    out.print(f"{indent}output: {json.dumps(result['output'])}")
    for ref, child in result["subworkflows"].items():
        out.print(f"{indent}sub-workflow of {ref}:")
        _print(child, indent + "  ")
