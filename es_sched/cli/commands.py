"""``es-sched submit|cancel|terminate|retry|pause|resume|signal|restart|rerun``, ``defs push``.

Thin wrappers around ``es_sched.commands.CommandClient``: every command is validated before it
is produced, and errors are ``EsSchedError``s that ``es_sched.cli.main.main`` prints as one
line with exit status 1. ``register(cli, defs)`` attaches the commands to the CLI groups.

Control commands (cancel, terminate, retry, pause, resume, signal, restart, rerun) print what
was sent; with ``--wait SECONDS`` they then read the decider's answer from the events topic
(the events caused by the command id): accepted -> the events, exit 0; refused
(``command.rejected``, or ``workflow.rejected`` for an unknown workflow) -> ``rejected:
<reason>`` on stderr as soon as it is written, exit 1; no answer in time -> exit 3.
"""

from __future__ import annotations

import getpass
import json
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from es_sched import bootstrap
from es_sched.commands import CommandClient, Submitted
from es_sched.domain.definitions import DefinitionError
from es_sched.errors import ConfigError, SchemaError
from es_sched.settings import load_settings

err = Console(stderr=True, width=None if sys.stderr.isatty() else 120)
FINAL_OK = "COMPLETED"
Send = Callable[[], Submitted]


def _client() -> CommandClient:
    try:
        return bootstrap.command_client(load_settings())
    except ConfigError as exc:
        err.print(f"[red]configuration error:[/] {exc}")
        sys.exit(2)


def actor() -> str:
    """Who is acting from this shell: ``cli:<OS user>``, recorded on the events a command
    causes (an operator action carries who did it)."""
    try:
        return f"cli:{getpass.getuser()}"
    except (KeyError, OSError):  # no passwd entry and no LOGNAME/USER (a bare container)
        return "cli:unknown"


def _json_object(text: str, what: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SchemaError(f"{what} is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise SchemaError(f"{what} must be a JSON object, got {type(value).__name__}")
    return value


def read_jsonl(text: str, source: str) -> list[tuple[int, dict[str, Any]]]:
    """(line number, input object) per non-blank line; a bad line raises naming its number."""
    inputs = []
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip():
            inputs.append((number, _json_object(line, f"{source}:{number}")))
    if not inputs:
        raise SchemaError(f"{source}: no input lines")
    return inputs


@click.command("submit")
@click.argument("name")
@click.option("--version", "version", type=int, help="Definition version (default: the latest).")
@click.option("--input", "input_json", help="The workflow input as a JSON object.")
@click.option(
    "--input-file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="JSONL: one workflow input object per line, one workflow per line.",
)
@click.option(
    "--priority", type=click.IntRange(0, 8), default=4, show_default=True, help="0 (highest) to 8."
)
@click.option(
    "--command-id",
    help="Idempotency key; with --input-file each line uses ID:LINE. Resubmitting answers with "
    "the same workflow ids.",
)
@click.option(
    "--correlation-id",
    help="Conductor's correlationId, a label of yours shared by related workflows (searchable); "
    "none by default.",
)
@click.option("--wait", "wait_s", type=float, help="Wait up to SECONDS for the final statuses.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON list.")
def submit(
    name: str,
    version: int | None,
    input_json: str | None,
    input_file: Path | None,
    priority: int,
    command_id: str | None,
    correlation_id: str | None,
    wait_s: float | None,
    as_json: bool,
) -> None:
    """Start workflow NAME, once per input; print the workflow ids (and final statuses)."""
    if (input_json is None) == (input_file is None):
        raise click.UsageError("give exactly one of --input and --input-file")
    if input_file is not None:
        text = input_file.read_text(encoding="utf-8")
        lines = read_jsonl(text, str(input_file))
        sources = [f"{input_file}:{n}" for n, _ in lines]
        ids = [f"{command_id}:{n}" for n, _ in lines] if command_id else None
        inputs = [doc for _, doc in lines]
    else:
        inputs = [_json_object(input_json or "", "--input")]
        sources = ["--input"]
        ids = [command_id] if command_id else None
    with _client() as client:
        start = client.start_watermarks() if wait_s is not None else None
        submitted = client.submit_many(
            name,
            inputs,
            version,
            priority,
            command_ids=ids,
            correlation_id=correlation_id,
            sources=sources,
            actor=actor(),
        )
        tokens = {s.workflow_id: s.token for s in submitted}
        if wait_s is None:
            _print_submitted(submitted, None, as_json, tokens)
            return
        err.print(f"submitted {len(submitted)} workflow(s); waiting up to {wait_s:g}s")
        statuses = client.wait([s.workflow_id for s in submitted], wait_s, start)
    _print_submitted(submitted, statuses, as_json, tokens)
    if any(status != FINAL_OK for status in statuses.values()):
        sys.exit(1)


def _print_submitted(
    submitted: list[Submitted],
    statuses: dict[str, str | None] | None,
    as_json: bool,
    tokens: dict[str, str | None],
) -> None:
    if as_json:
        rows: list[dict[str, Any]] = []
        for s in submitted:
            row: dict[str, Any] = {
                "workflow_id": s.workflow_id,
                "command_id": s.command_id,
                "token": tokens.get(s.workflow_id),
            }
            if statuses is not None:
                row["status"] = statuses.get(s.workflow_id)
            rows.append(row)
        click.echo(json.dumps(rows, indent=2))
        return
    for s in submitted:
        if statuses is None:
            click.echo(s.workflow_id)
        else:
            click.echo(f"{s.workflow_id} {statuses.get(s.workflow_id) or 'NOT_FINISHED'}")


WF_ID = click.argument("wf_id")
EXPECTED = click.option(
    "--expected-version", type=int, help="Refuse unless the workflow is still at this seq."
)
COMMAND_ID = click.option("--command-id", help="Idempotency key (default: a fresh uuid).")
WAIT = click.option(
    "--wait",
    "wait_s",
    type=float,
    help="Wait up to SECONDS for the decider's answer: exit 0 when accepted, 1 at once when "
    "refused (the reason is printed), 3 when no answer came in time.",
)
EXIT_REFUSED, EXIT_NO_ANSWER = 1, 3


def _act(client: CommandClient, what: str, wait_s: float | None, send: Send) -> None:
    """Send one control command; with ``wait_s``, wait for its outcome and exit by it."""
    start = client.start_watermarks() if wait_s is not None else None
    sent = send()
    click.echo(f"{what} {sent.workflow_id} command_id={sent.command_id}")
    if wait_s is None:
        return
    outcome = client.outcome(sent, wait_s, start)
    if outcome is None:
        click.echo(
            f"no answer to {what} of {sent.workflow_id} within {wait_s:g}s (is a decider running?)",
            err=True,
        )
        sys.exit(EXIT_NO_ANSWER)
    reason = outcome.rejection
    if reason is not None:
        click.echo(f"rejected: {reason}", err=True)
        sys.exit(EXIT_REFUSED)
    click.echo(f"accepted: {outcome.describe()}")


@click.command("cancel")
@WF_ID
@click.option("--reason", default="canceled", show_default=True)
@EXPECTED
@COMMAND_ID
@WAIT
def cancel(
    wf_id: str,
    reason: str,
    expected_version: int | None,
    command_id: str | None,
    wait_s: float | None,
) -> None:
    """Cancel a running workflow (its CALLBACK tasks still run)."""
    with _client() as client:
        send = partial(client.cancel, wf_id, reason, expected_version, command_id, actor=actor())
        _act(client, "cancel", wait_s, send)


@click.command("terminate")
@WF_ID
@click.option("--reason", default="terminated", show_default=True)
@EXPECTED
@COMMAND_ID
@WAIT
def terminate(
    wf_id: str,
    reason: str,
    expected_version: int | None,
    command_id: str | None,
    wait_s: float | None,
) -> None:
    """Terminate a running workflow."""
    with _client() as client:
        send = partial(client.terminate, wf_id, reason, expected_version, command_id, actor=actor())
        _act(client, "terminate", wait_s, send)


def _simple(verb: str, doc: str) -> click.Command:
    @click.command(verb, help=doc)
    @WF_ID
    @EXPECTED
    @COMMAND_ID
    @WAIT
    def command(
        wf_id: str, expected_version: int | None, command_id: str | None, wait_s: float | None
    ) -> None:
        with _client() as client:
            method: Callable[..., Submitted] = getattr(client, verb)
            send = partial(method, wf_id, expected_version, command_id, actor=actor())
            _act(client, verb, wait_s, send)

    return command


retry = _simple("retry", "Retry a failed, timed-out or terminated workflow from where it failed.")
pause = _simple("pause", "Pause a running workflow: nothing new is scheduled until resume.")
resume = _simple("resume", "Resume a paused workflow.")


@click.command("signal")
@WF_ID
@click.option("--ref", help="The WAIT task's reference name (default: the oldest waiting one).")
@click.option(
    "--status", type=click.Choice(["COMPLETED", "FAILED"]), default="COMPLETED", show_default=True
)
@click.option("--output", "output_json", default="{}", help="The task output as a JSON object.")
@EXPECTED
@COMMAND_ID
@WAIT
def signal(
    wf_id: str,
    ref: str | None,
    status: str,
    output_json: str,
    expected_version: int | None,
    command_id: str | None,
    wait_s: float | None,
) -> None:
    """Complete (or fail) a waiting WAIT task of a workflow."""
    output = _json_object(output_json, "--output")
    with _client() as client:
        send = partial(
            client.signal,
            wf_id,
            output,
            ref,
            status,
            expected_version,
            command_id,
            actor=actor(),
        )
        _act(client, "signal", wait_s, send)


@click.command("restart")
@WF_ID
@click.option(
    "--latest-definition",
    "latest_of",
    metavar="NAME",
    help="Run with the latest registered version of definition NAME (the workflow's own).",
)
@click.option("--input", "input_json", help="A new workflow input (default: the same input).")
@EXPECTED
@COMMAND_ID
@WAIT
def restart(
    wf_id: str,
    latest_of: str | None,
    input_json: str | None,
    expected_version: int | None,
    command_id: str | None,
    wait_s: float | None,
) -> None:
    """Restart a workflow in a terminal state from its beginning (same id, same input)."""
    new_input = _json_object(input_json, "--input") if input_json is not None else None
    with _client() as client:
        send = partial(
            client.restart,
            wf_id,
            latest_of,
            new_input,
            expected_version,
            command_id,
            actor=actor(),
        )
        _act(client, "restart", wait_s, send)


@click.command("rerun")
@WF_ID
@click.option("--from-task", "task", metavar="REF", help="Task reference name or task id.")
@click.option("--task-input", "task_json", help="JSON object merged over the task's input.")
@click.option("--input", "input_json", help="A new workflow input (default: the same input).")
@EXPECTED
@COMMAND_ID
@WAIT
def rerun(
    wf_id: str,
    task: str | None,
    task_json: str | None,
    input_json: str | None,
    expected_version: int | None,
    command_id: str | None,
    wait_s: float | None,
) -> None:
    """Rerun a workflow in a terminal state from a task: it and every task after it run again
    (without --from-task: a restart)."""
    task_input = _json_object(task_json, "--task-input") if task_json is not None else None
    new_input = _json_object(input_json, "--input") if input_json is not None else None
    with _client() as client:
        send = partial(
            client.rerun,
            wf_id,
            task,
            task_input,
            new_input,
            expected_version,
            command_id,
            actor=actor(),
        )
        _act(client, "rerun", wait_s, send)


@click.command("push")
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
def push(paths: tuple[Path, ...]) -> None:
    """Register workflow definitions and TaskDefs; nothing is pushed if one has a problem."""
    with _client() as client:
        try:
            keys = client.push_definitions(paths)
        except DefinitionError as exc:
            err.print(f"[red]refused, nothing pushed:[/] {len(exc.problems)} problem(s)")
            for problem in exc.problems:
                err.print(f"    - {problem}", markup=False)
            sys.exit(1)
    for key in keys:
        click.echo(f"pushed {key}")
