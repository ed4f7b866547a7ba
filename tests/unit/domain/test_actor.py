"""Every operator action carries who did it: a command's optional ``actor`` is recorded on the
envelope of every event it causes, refusals included, and survives the serialization
boundary; events without one (runtime inputs, and everything logged before actors existed)
decode with ``actor`` None (ADR 27)."""

from __future__ import annotations

import json

from es_sched.domain import commands as c
from es_sched.domain.decide import decide
from es_sched.domain.ids import counter_ids
from es_sched.serialization import (
    decode_event,
    decode_input,
    encode_event,
    encode_input,
    event_to_dict,
)
from testkit.golden import NAMES, history, lines
from tests.unit.domain.harness import SCRIPTS, T0, Driver, task, workflow

DEFINITION = workflow(task("probe", "media.probe"), task("encode", "media.encode"))


def test_a_commands_actor_is_on_every_event_it_causes_and_none_on_runtime_events() -> None:
    d = Driver(DEFINITION)
    assert all(e.actor is None for e in d.events)  # the harness's start names nobody
    d.report("probe", "STARTED")
    events = d.send(c.TerminateWorkflow("term-1", "wf-1", actor="cli:alice"))
    assert events and {e.actor for e in events} == {"cli:alice"}
    assert {e.causation_id for e in events} == {"term-1"}


def test_a_refusal_inside_a_history_names_the_actor() -> None:
    d = Driver(DEFINITION)
    (event,) = d.send(c.ResumeWorkflow("resume-1", "wf-1", actor="api:ops-key"))
    assert event.type == "command.rejected" and event.actor == "api:ops-key"


def test_a_refusal_outside_any_history_names_the_actor() -> None:
    inp = c.CancelWorkflow("cancel-1", "no-such-workflow", actor="cli:bob")
    (event,) = decide(None, inp, T0, counter_ids(), SCRIPTS)
    assert event.type == "workflow.rejected" and event.actor == "cli:bob"


def test_actor_survives_encode_and_decode_of_events_and_commands() -> None:
    d = Driver(DEFINITION)
    (event, *_) = d.send(c.PauseWorkflow("pause-1", "wf-1", actor="cli:carol"))
    raw = encode_event(event)
    assert json.loads(raw)["actor"] == "cli:carol"
    assert decode_event(raw) == event
    cmd = c.RetryWorkflow("retry-1", "wf-1", actor="cli:carol")
    assert decode_input(encode_input(cmd)) == cmd


def test_an_event_without_actor_has_no_actor_key_on_the_wire() -> None:
    d = Driver(DEFINITION)
    doc = json.loads(encode_event(d.events[0]))
    assert "actor" not in doc and "actor" not in event_to_dict(d.events[0])


BEFORE_ACTORS = ("media_1080_v1", "media_480", "media_transcode_exhausted")


def test_a_logged_event_without_actor_still_decodes() -> None:
    """These golden histories were recorded before actors existed: no line names one, each
    decodes with actor None and encodes back with the same envelope keys (no ``actor``)."""
    assert set(BEFORE_ACTORS) <= set(NAMES)
    for name in BEFORE_ACTORS:
        for line in lines(name):
            assert "actor" not in json.loads(line)
            event = decode_event(line)
            assert event.actor is None
            assert json.loads(encode_event(event)).keys() == json.loads(line).keys()


def test_the_golden_rerun_names_its_operator_on_the_events_it_caused() -> None:
    events = history("media_transcode_rerun")
    caused = [e for e in events if e.causation_id == "rerun-ops-1"]
    assert caused[0].type == "workflow.rerun_started"
    assert {e.actor for e in caused} == {"cli:ops"}
    assert all(e.actor is None for e in events if e.causation_id != "rerun-ops-1")


def test_a_command_written_before_actor_existed_still_decodes() -> None:
    raw = b'{"type":"workflow.retry","schema_version":1,"input_id":"r1","workflow_id":"wf-1"}'
    inp = decode_input(raw)
    assert isinstance(inp, c.RetryWorkflow) and inp.actor is None
