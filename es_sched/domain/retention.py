"""Bounded decider state: when an ended workflow is forgotten, and what a late input then gets.

A workflow that ended (``WORKFLOW_TERMINAL``) is kept whole for ``retain_s`` seconds after its
``ended_at`` (``ES_SCHED_RUN_RETAIN_FINISHED_S``): long enough for a retry of a failed one, a
late report or a duplicate command to be answered from its state as before. After that the
decider forgets it (its changelog snapshot is tombstoned, ADR 18) and keeps only an ``Ended``
marker: its id, final status and last seq. Its events stay in the log forever.

``forget_at(state, retain_s)`` and ``due(state, now, retain_s)`` are the retention decision, a
function of the state and the time the shell passes in; ``answer_ended(marker, input, now)`` is
what ``decide`` would have answered, decided from the marker alone, never by a restore:

- ``StartWorkflow`` (the same command id: the workflow id is uuid5 of it): nothing. The workflow
  started once and ended; it is never started again.
- a command that asks for a change (cancel, terminate, pause, resume, retry, signal, register):
  a ``workflow.rejected`` refusal outside any history (ADR 11) naming the ended status and seq.
  It cannot be a ``command.rejected`` in the history: that needs the state's seq to move on,
  and the point is not to hold the state.
- runtime inputs (dispatches, lease expiries, worker reports, timers, a child's end): nothing,
  as for an ended workflow still held: the task they name ended with the workflow.

Pure: no clock, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from es_sched.domain import commands as c
from es_sched.domain.events import Event
from es_sched.domain.pickling import frozen_by_constructor
from es_sched.domain.refusals import refusal_of
from es_sched.domain.state import WORKFLOW_TERMINAL, WorkflowState

ENDED_STATUSES = tuple(sorted(WORKFLOW_TERMINAL))
"""The statuses a marker can hold, in a fixed order (the shell packs a marker by index)."""


@dataclass(frozen=True, slots=True)
class Ended:
    """What is left of a forgotten workflow: enough to answer a late input."""

    workflow_id: str
    status: str
    seq: int


def forget_at(state: WorkflowState, retain_s: float) -> datetime | None:
    """When ``state`` may be forgotten; None while it has not ended."""
    return forget_time(state.status, state.ended_at, retain_s)


def forget_time(status: str, ended_at: datetime | None, retain_s: float) -> datetime | None:
    """``forget_at`` from the two fields it reads: a state the decider holds undecoded (ADR
    52) carries them beside its snapshot."""
    if status not in WORKFLOW_TERMINAL or ended_at is None:
        return None
    return ended_at + timedelta(seconds=retain_s)


def due(state: WorkflowState, now: datetime, retain_s: float) -> bool:
    """Whether ``state`` is to be forgotten at ``now`` (a retried workflow is live again)."""
    return due_at(state.status, state.ended_at, now, retain_s)


def due_at(status: str, ended_at: datetime | None, now: datetime, retain_s: float) -> bool:
    """``due`` from the fields it reads (see ``forget_time``)."""
    at = forget_time(status, ended_at, retain_s)
    return at is not None and at <= now


def marker(state: WorkflowState) -> Ended:
    return ended_marker(state.workflow_id, state.status, state.seq)


def ended_marker(workflow_id: str, status: str, seq: int) -> Ended:
    assert status in WORKFLOW_TERMINAL, "only an ended workflow is forgotten"
    return Ended(workflow_id, status, seq)


def answer_ended(ended: Ended, inp: c.Input, now: datetime) -> list[Event]:
    """The answer to ``inp`` for a forgotten workflow (see the module docstring)."""
    if isinstance(inp, c.StartWorkflow) or not isinstance(inp, c.Command):
        return []
    reason = (
        f"workflow ended {ended.status} at seq {ended.seq} and its state was retired after "
        f"the retention period: {inp.TYPE} refused"
    )
    return [refusal_of(inp, now, reason)]


frozen_by_constructor(globals())  # pickled through constructors (domain.pickling, ADR 51)
