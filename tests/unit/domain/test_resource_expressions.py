"""A worker task's ``"resources": "${...}"``: resolved when the task is scheduled (the media
pipeline declares each transcode's needs from the estimate its probe computed)."""

from __future__ import annotations

from typing import Any

from es_sched.domain.events import TaskScheduled
from es_sched.domain.validation import validate_workflow
from es_sched.serialization.codec import decode_event, encode_event
from tests.unit.domain.harness import Driver, task, workflow

TASKDEFS = [{"name": "encode", "retryCount": 1, "resources": {"cpu": 2, "memory_mb": 1024}}]


def pipeline(resources: Any) -> dict[str, Any]:
    return workflow(
        task("probe"),
        task("encode", inputParameters={"h": "${probe.output.height}"}, resources=resources),
    )


def test_resources_resolve_to_what_an_earlier_task_estimated() -> None:
    d = Driver(pipeline("${probe.output.estimates.h264_720}"), taskdefs=TASKDEFS)
    estimate = {"cpu": 1.5, "memory_mb": 640, "gpu_memory_mb": 0}
    d.report("probe", output={"height": 720, "estimates": {"h264_720": estimate}})
    encode = d.latest("encode")
    assert encode.status == "SCHEDULED"
    assert encode.resources == {"cpu": 1.5, "memory_mb": 640, "gpu_memory_mb": 0, "custom": {}}


def test_a_retry_resolves_them_again() -> None:
    d = Driver(pipeline("${probe.output.estimates.h264_720}"), taskdefs=TASKDEFS)
    d.report("probe", output={"estimates": {"h264_720": {"cpu": 0.5, "memory_mb": 256}}})
    d.report("encode", status="FAILED", reason="crash")
    d.advance(3600)
    d.fire("retry", "encode")
    second = d.latest("encode")
    assert second.attempt == 2
    assert (second.resources["cpu"], second.resources["memory_mb"]) == (0.5, 256)


def test_an_expression_resolving_to_null_falls_back_to_the_taskdef() -> None:
    d = Driver(pipeline("${probe.output.estimates.h264_720}"), taskdefs=TASKDEFS)
    d.report("probe", output={"height": 720})  # e.g. a no-op worker echoing its input
    encode = d.latest("encode")
    assert encode.status == "SCHEDULED"
    assert (encode.resources["cpu"], encode.resources["memory_mb"]) == (2.0, 1024)


def test_an_expression_resolving_to_something_else_fails_the_task_for_good() -> None:
    d = Driver(pipeline("${probe.output.estimates}"), taskdefs=TASKDEFS)
    d.report("probe", output={"estimates": {"cpu": -1}})
    encode = d.latest("encode")
    assert encode.status == "FAILED_WITH_TERMINAL_ERROR"
    assert "cpu must be a non-negative number" in (encode.reason or "")
    assert encode.attempt == 1  # a terminal failure: no retry of a task that cannot be placed
    assert d.st.status == "FAILED"


def test_validation_accepts_one_expression_and_checks_its_reference() -> None:
    assert validate_workflow(pipeline("${probe.output.estimates.h264_720}"), TASKDEFS) == []
    problems = validate_workflow(pipeline("${nope.output.x}"), TASKDEFS)
    assert any("resources refers to unknown task 'nope'" in p for p in problems), problems
    problems = validate_workflow(pipeline("cpu=${probe.output.cpu}"), TASKDEFS)
    assert any("resources must be an object or one ${...} expression" in p for p in problems)


def test_a_taskdef_cannot_use_an_expression() -> None:
    taskdefs = [{"name": "encode", "resources": "${probe.output.estimates.h264_720}"}]
    problems = validate_workflow(pipeline({"cpu": 1}), taskdefs)
    assert any("taskdef 'encode': resources must be an object" in p for p in problems), problems


def test_an_estimate_keeps_its_inputs_through_the_event_log() -> None:
    """ADR 66: the estimate's inputs ride in task.scheduled, which the schema admits."""
    d = Driver(pipeline("${probe.output.estimates.h264_720}"), taskdefs=TASKDEFS)
    inputs = {"model": "media-cost/1", "cpu_seconds": 12.5, "cpu_max": 2.0, "duration_s": 30.0}
    estimate = {"cpu": 0.5, "memory_mb": 384, "inputs": inputs}
    events = d.report("probe", output={"height": 720, "estimates": {"h264_720": estimate}})
    (scheduled,) = [e for e in events if isinstance(e.payload, TaskScheduled)]
    assert decode_event(encode_event(scheduled)) == scheduled
    assert d.latest("encode").resources["inputs"] == inputs
