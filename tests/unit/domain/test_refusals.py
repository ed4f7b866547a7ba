"""Refusals are events: ``decide`` answers every input for a workflow with no history with one
``workflow.rejected`` event outside any history (seq 0, id from the input id, never folded),
instead of raising for the shell to dead-letter (ADR 11). Inputs that the state of an existing
workflow forbids keep their ``command.rejected`` inside its history."""

from __future__ import annotations

from typing import Any

import pytest

from es_sched.domain import commands as c
from es_sched.domain.decide import decide, decide_with_state
from es_sched.domain.events import Event, WorkflowRejected
from es_sched.domain.evolve import evolve, fold
from es_sched.domain.ids import counter_ids, refusal_event_id, workflow_id_for_command
from es_sched.domain.refusals import REFUSAL_SEQ, is_refusal
from es_sched.errors import DomainError
from es_sched.serialization import decode_event, encode_event
from tests.unit.domain.harness import SCRIPTS, T0, Driver, task, workflow

COMMAND_ID = "ingest-ep1043"
WF = workflow_id_for_command(COMMAND_ID)
DEFINITION = workflow(task("probe", "media.probe"), name="media_probe")


def start(definition: dict[str, Any] | None, **extra: Any) -> c.StartWorkflow:
    """A StartWorkflow as an upstream service produces it straight to the commands topic."""
    return c.StartWorkflow(
        COMMAND_ID,
        WF,
        name="media_probe",
        version=2,
        input={"source": "s3://in/1.mp4"},
        definition=definition,
        **extra,
    )


def refused(inp: c.Input) -> tuple[Event, WorkflowRejected]:
    events, state = decide_with_state(None, inp, T0, counter_ids(), SCRIPTS)
    assert state is None, "a refusal leaves no state behind"
    (event,) = events
    assert isinstance(event.payload, WorkflowRejected)
    return event, event.payload


def test_a_start_without_a_definition_is_refused_outside_any_history() -> None:
    event, p = refused(start(None, correlation_id="asset-ep1043"))
    assert event.type == "workflow.rejected" and is_refusal(event)
    assert (event.workflow_id, event.seq) == (WF, REFUSAL_SEQ) == (WF, 0)
    assert event.event_id == refusal_event_id(WF, COMMAND_ID)
    assert (event.causation_id, event.correlation_id) == (COMMAND_ID, "asset-ep1043")
    assert (p.command_id, p.command_type, p.name, p.version) == (
        COMMAND_ID,
        "workflow.start",
        "media_probe",
        2,
    )
    assert p.reason == (
        "no definition for workflow 'media_probe' version 2: none embedded and none registered"
    )
    assert decode_event(encode_event(event)) == event  # its schema takes seq 0


def test_an_invalid_embedded_definition_is_refused_with_every_problem() -> None:
    broken = workflow(
        task("probe", "media.probe"),
        task("probe", "media.again"),  # a duplicate reference
        task("pick", type_="SWITCH"),  # no evaluator, no expression
        name="media_probe",
    )
    event, p = refused(start(broken))
    assert event.seq == 0 and len(p.problems) >= 2
    assert p.reason.startswith("invalid definition of workflow 'media_probe' version 2: ")
    assert p.problems[0] in p.reason
    assert any("probe" in problem for problem in p.problems)


def test_the_same_start_sent_again_after_its_definition_is_registered_starts_normally() -> None:
    first, _ = refused(start(None))
    again = refused(start(None))[0]
    assert again == first, "the same input refused twice is the same event (same id)"
    # Registered meanwhile: the decider now embeds it, and the same command starts.
    events = decide(None, start(DEFINITION), T0, counter_ids(), SCRIPTS)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert events[0].type == "workflow.started"
    assert events[0].causation_id == COMMAND_ID and not any(map(is_refusal, events))
    log = [first, *events]  # what the events topic holds under WF, in order
    assert fold(log) == fold(events), "the refusal is not part of the history"


CONTROL: list[c.Input] = [
    c.CancelWorkflow("cmd-1", "wf-404", reason="operator"),
    c.TerminateWorkflow("cmd-2", "wf-404"),
    c.RetryWorkflow("cmd-3", "wf-404"),
    c.PauseWorkflow("cmd-4", "wf-404"),
    c.ResumeWorkflow("cmd-5", "wf-404"),
    c.SignalWorkflow("cmd-6", "wf-404", ref="approve"),
]
RUNTIME: list[c.Input] = [
    c.DispatchTask("in-1", "wf-404", task_id="t1", worker_id="w1", lease_token="tok"),
    c.ExpireLease("in-2", "wf-404", task_id="t1"),
    c.ReportCompleted("in-3", "wf-404", task_id="t1", worker_id="w1", lease_token="tok"),
    c.FireTimer("in-4", "wf-404", kind="workflow_timeout"),
    c.ChildWorkflowEnded("in-5", "wf-404", child_workflow_id="wf-c", task_id="t1"),
]


@pytest.mark.parametrize("inp", CONTROL + RUNTIME, ids=lambda i: i.TYPE)
def test_any_other_input_for_an_unknown_workflow_is_refused_not_raised(inp: c.Input) -> None:
    event, p = refused(inp)
    assert (event.workflow_id, event.seq, event.causation_id) == ("wf-404", 0, inp.input_id)
    assert event.event_id == refusal_event_id("wf-404", inp.input_id)
    assert (p.command_id, p.command_type, p.name, p.version) == (inp.input_id, inp.TYPE, None, None)
    assert p.reason == f"unknown workflow 'wf-404': {inp.TYPE} refused"


def test_control_commands_the_state_forbids_stay_command_rejected_inside_the_history() -> None:
    d = Driver(workflow(task("enc")))
    (rejected,) = d.send(c.ResumeWorkflow("cmd-resume", "wf-1"))
    assert (rejected.type, rejected.seq) == ("command.rejected", d.st.seq)
    assert rejected.payload.reason == "workflow is RUNNING"  # type: ignore[attr-defined]


def test_a_refusal_is_never_evolved_and_fold_skips_it() -> None:
    event, _ = refused(c.CancelWorkflow("cmd-1", "wf-1"))
    with pytest.raises(DomainError, match="outside any history"):
        evolve(None, event)
    d = Driver(workflow(task("enc")))
    with pytest.raises(DomainError, match="outside any history"):
        evolve(d.st, event)
    assert fold([event]) is None
    assert fold([*d.events[:1], event, *d.events[1:]]) == fold(d.events)
