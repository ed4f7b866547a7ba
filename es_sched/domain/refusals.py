"""Refusals outside any history: what ``decide`` answers for a workflow id that has none.

An input whose workflow has no history cannot be answered inside one: a StartWorkflow that
cannot start (no definition was embedded or found, the definition fails validation, or its SLA
tier or deadline is not acceptable: ``sla.refusal``), or a
cancel, terminate, retry, pause, resume, signal or runtime report for a workflow that does not
exist. ``refusal(inp, now)`` returns the ``workflow.rejected`` event for it, or None for a
StartWorkflow that starts. The event is written under the input's workflow id so a sender
watching that id learns why, but it belongs to no history (ADR 11):

- ``seq`` is ``REFUSAL_SEQ`` (0): histories count from 1, so seq stays contiguous 1..n over
  the events that are folded, and a workflow refused and later started has a normal history;
- its id is ``ids.refusal_event_id(workflow id, input id)``, so the same input refused twice is
  the same event, which readers dedupe by id;
- it is never folded (``evolve`` refuses it, ``fold`` skips it) and no effect follows it.

Refusals of inputs to an existing workflow stay inside its history (``command.rejected``,
``task.completion_rejected``). Pure: the shell passes the time; nothing reads a registry.
"""

from __future__ import annotations

from datetime import datetime

from es_sched.domain import commands as c
from es_sched.domain import sla
from es_sched.domain.events import Event, WorkflowRejected
from es_sched.domain.ids import refusal_event_id
from es_sched.domain.validation import validate_workflow_cached

REFUSAL_SEQ = 0
MAX_PROBLEMS_IN_REASON = 3


def is_refusal(event: Event) -> bool:
    """Whether ``event`` is outside every history (never folded, never projected as a row)."""
    return isinstance(event.payload, WorkflowRejected)


def refusal(inp: c.Input, now: datetime) -> Event | None:
    """The refusal of ``inp`` when its workflow has no history; None when it starts one."""
    if not isinstance(inp, c.StartWorkflow):
        return _event(inp, now, f"unknown workflow {inp.workflow_id!r}: {inp.TYPE} refused")
    which = f"{inp.name!r} version {inp.version if inp.version is not None else '(latest)'}"
    if inp.definition is None:
        return _event(
            inp, now, f"no definition for workflow {which}: none embedded and none registered"
        )
    sla_problem = sla.refusal(inp.sla_tier, inp.deadline, now) or sla.retries_refusal(
        inp.sla_retries
    )
    if sla_problem is not None:
        return _event(inp, now, f"cannot start workflow {which}: {sla_problem}", [sla_problem])
    problems = validate_workflow_cached(inp.definition, inp.taskdefs)
    if not problems:
        return None
    shown = "; ".join(problems[:MAX_PROBLEMS_IN_REASON])
    more = len(problems) - MAX_PROBLEMS_IN_REASON
    tail = f" (and {more} more)" if more > 0 else ""
    return _event(inp, now, f"invalid definition of workflow {which}: {shown}{tail}", problems)


def refusal_of(inp: c.Input, now: datetime, reason: str) -> Event:
    """A refusal of ``inp`` outside any history for ``reason`` (also used for a workflow whose
    state was retired: ``domain.retention``)."""
    return _event(inp, now, reason)


def _event(inp: c.Input, now: datetime, reason: str, problems: list[str] | None = None) -> Event:
    start = inp if isinstance(inp, c.StartWorkflow) else None
    payload = WorkflowRejected(
        command_id=inp.input_id,
        command_type=inp.TYPE,
        reason=reason,
        name=start.name if start is not None else None,
        version=start.version if start is not None else None,
        problems=list(problems or []),
    )
    correlation = (start.correlation_id if start is not None else None) or inp.workflow_id
    return Event(
        refusal_event_id(inp.workflow_id, inp.input_id),
        inp.workflow_id,
        REFUSAL_SEQ,
        now,
        inp.input_id,
        correlation,
        payload,
        inp.actor if isinstance(inp, c.Command) else None,
    )
