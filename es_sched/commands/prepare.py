"""The pure half of the command side: what a client checks before anything reaches Kafka.

- ``prepare(cmd, catalog, cap)``: validate a command against ``schemas/commands/`` and encode it;
  an invalid command or one over the size cap raises ``SchemaError`` and yields no bytes.
- ``resolve(definitions, name, version)``: the definition a StartWorkflow embeds, with its
  TaskDefs and the pinned definitions of the children it may start; a missing one (or a
  missing sub-workflow) raises ``UnknownDefinition``.
- ``definition_problems(docs, catalog)``: every reason a set of definition files may not be
  pushed (JSON Schema, ``validate_workflow``, sub-workflow cycles).
- ``terminal_status(event)``: the final status an event announces, if it is a final event
  (``REJECTED`` for a start refused outside any history); ``awaited_final(raw, pending)`` finds
  such events of awaited workflows without decoding.
- ``Outcome``: what one command caused, read back from the events topic (``caused_by(raw,
  command_id)`` picks its records cheaply): accepted with its events, or the rejection's reason.

Nothing here touches the network, the clock or the environment.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any, Protocol

from es_sched.commands.files import Documents
from es_sched.domain.commands import Input
from es_sched.domain.events import (
    CommandRejected,
    Event,
    WorkflowCompleted,
    WorkflowEnded,
    WorkflowRejected,
)
from es_sched.domain.intake import record_refusal
from es_sched.domain.pins import pin
from es_sched.domain.validation import sub_workflow_cycles, validate_workflow
from es_sched.errors import DomainError, SchemaError
from es_sched.serialization import (
    SchemaCatalog,
    decode_workflow_end,
    encode_input,
    input_to_dict,
    schema_dir,
)

REJECTED = "REJECTED"  # the "final status" of a start refused outside any history
CAP_VARIABLE = "ES_SCHED_RUN_COMMAND_MAX_BYTES"
JSON = dict[str, Any]


class UnknownDefinition(DomainError):
    """No workflow definition of that name (and version) has been pushed."""

    def __init__(self, name: str, version: int | None, needed_by: str | None = None) -> None:
        which = f"{name!r} version {version}" if version is not None else f"{name!r} (any version)"
        via = f" (a SUB_WORKFLOW of {needed_by!r})" if needed_by else ""
        super().__init__(
            f"no workflow definition {which}{via} in the registry; "
            f"register it first with `es-sched defs push FILE...`"
        )
        self.name, self.version, self.needed_by = name, version, needed_by


def prepare(cmd: Input, catalog: SchemaCatalog, cap: int) -> bytes:
    """The bytes to produce for ``cmd``, or ``SchemaError`` saying why it may not be sent."""
    doc = input_to_dict(cmd)
    catalog.validate("commands", cmd.TYPE, cmd.SCHEMA_VERSION, doc)
    try:
        raw = encode_input(cmd)
    except TypeError as exc:  # a value JSON cannot hold (a set, a datetime in the input...)
        raise SchemaError(f"{cmd.TYPE}: cannot encode as JSON: {exc}") from None
    refused = record_refusal(raw, cap)  # the decider's rule: refused here, not there
    if refused is not None:
        setting = f" ({CAP_VARIABLE})" if len(raw) > cap else ""
        raise SchemaError(f"{cmd.TYPE}: {refused}{setting}")
    return raw


class Definitions(Protocol):
    """What ``resolve`` needs of ``es_sched.kafka.registry.DefinitionRegistry``."""

    def workflow(self, name: str, version: int | None = None) -> JSON | None: ...

    def taskdefs_for(self, definition: JSON) -> list[JSON]: ...


@dataclass(frozen=True)
class Resolved:
    definition: JSON
    taskdefs: list[JSON] = field(default_factory=list)
    subworkflow_definitions: list[JSON] = field(default_factory=list)


def resolve(definitions: Definitions, name: str, version: int | None = None) -> Resolved:
    """The definition to embed in a StartWorkflow, so the decider never needs the registry,
    with every child it may start pinned (``domain.pins.pin``: SUB_WORKFLOW, literal
    START_WORKFLOW, failureWorkflow, transitively) and their TaskDefs. A SUB_WORKFLOW nobody
    registered is refused now; an unknown START_WORKFLOW or failureWorkflow is left to be
    looked up when it starts, as the decider would."""
    root = definitions.workflow(name, version)
    if root is None:
        raise UnknownDefinition(name, version)

    def lookup(child: str, child_version: int | None) -> tuple[JSON, list[JSON]] | None:
        doc = definitions.workflow(child, child_version)
        return (doc, definitions.taskdefs_for(doc)) if doc is not None else None

    pinned = pin(root, definitions.taskdefs_for(root), lookup)
    for ref, needed_by in pinned.missing:
        if ref.kind == "SUB_WORKFLOW":
            raise UnknownDefinition(ref.name, ref.version, needed_by=needed_by)
    return Resolved(root, pinned.taskdefs, pinned.definitions)


def definition_problems(docs: Documents, catalog: SchemaCatalog) -> list[str]:
    """Every problem of the given definitions and TaskDefs, each naming its document."""
    problems: list[str] = []
    for doc in docs.workflows:
        label = f"{doc.get('name')} v{doc.get('version', 1)} ({docs.sources.get(id(doc))})"
        found = _schema(catalog, "workflow", doc) + validate_workflow(doc, docs.taskdefs)
        problems += [f"{label}: {p}" for p in found]
    for td in docs.taskdefs:
        problems += [f"taskdef {td.get('name')}: {p}" for p in _schema(catalog, "taskdef", td)]
    problems += sub_workflow_cycles({str(d.get("name")): d for d in docs.workflows})
    if not docs.workflows and not docs.taskdefs:
        problems.append("no workflow definition or TaskDef in the given files")
    return problems


def _schema(catalog: SchemaCatalog, kind: str, doc: JSON) -> list[str]:
    try:
        catalog.check(schema_dir() / "definitions" / f"{kind}.v1.json", doc, kind)
    except SchemaError as exc:
        return [str(exc)]
    return []


def terminal_status(event: Event) -> str | None:
    """``COMPLETED`` for ``workflow.completed``, the status of ``workflow.ended``, else None."""
    payload = event.payload
    if isinstance(payload, WorkflowCompleted):
        return "COMPLETED"
    if isinstance(payload, WorkflowEnded):
        return payload.status
    if isinstance(payload, WorkflowRejected) and payload.command_type == "workflow.start":
        return REJECTED  # a refused cancel under the same id says nothing of the start
    return None


def awaited_final(raw: bytes | None, pending: Collection[str]) -> str | None:
    """The awaited workflow whose final event ``raw`` may be, judged before full decoding
    (``decode_workflow_end``: whatever is not JSON is skipped)."""
    workflow_id = decode_workflow_end(raw)
    return workflow_id if workflow_id is not None and workflow_id in pending else None


@dataclass(frozen=True)
class Outcome:
    """What one command caused: the events the decider wrote for it, in order (one decision,
    so one transaction, consecutive in the workflow's partition)."""

    command_id: str
    events: tuple[Event, ...]

    @property
    def rejection(self) -> str | None:
        """The reason the command was refused (``command.rejected`` inside the workflow's
        history, ``workflow.rejected`` for a workflow with none), None when it was accepted."""
        for event in self.events:
            if isinstance(event.payload, CommandRejected | WorkflowRejected):
                return event.payload.reason
        return None

    def describe(self) -> str:
        """The events, one clause each: ``workflow.ending CANCELED (operator), ...``."""
        parts = []
        for event in self.events:
            p = event.payload
            status, reason = getattr(p, "status", None), getattr(p, "reason", None)
            words = [
                event.type,
                *([str(status)] if status else []),
                *([f"({reason})"] if reason else []),
            ]
            parts.append(" ".join(words))
        return ", ".join(parts)


def caused_by(raw: bytes | None, command_id: str) -> bool:
    """Whether ``raw`` may be an event caused by ``command_id``, judged without decoding (the
    caller decodes the few that may be and checks ``causation_id``)."""
    quoted = json.dumps(command_id, ensure_ascii=False)[1:-1]  # as the JSON writer escapes it
    return raw is not None and quoted.encode() in raw
