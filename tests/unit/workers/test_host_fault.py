"""``HostFault`` (ADR 58): a handler says its host failed; the report carries it, the decider
writes it on task.failed, and only that (never a terminal failure) blames the worker."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

import pytest

from es_sched.blacklist import HOST_FAULT, blame
from es_sched.domain import commands as c
from es_sched.serialization import decode_input, encode_input, wire
from es_sched.serialization.upcasters import upcast
from es_sched.workers import HostFault, TaskFailure
from es_sched.workers.context import outcome

pytestmark = pytest.mark.unit
A = wire.Assignment(
    "w", "wf", "t1", "media.transcode", 1, 1, "tok", "2026-01-01T00:00:00+00:00", {}
)


def _raised(exc: BaseException) -> Future[Any]:
    f: Future[Any] = Future()
    f.set_exception(exc)
    return f


def test_a_host_fault_is_reported_retryable_and_blamed_on_the_host() -> None:
    report = outcome(A, "w", _raised(HostFault("disk /out not writable", {"errno": 30})))
    assert isinstance(report, c.ReportFailed)
    assert report.host_fault and not report.terminal and report.output == {"errno": 30}
    assert decode_input(encode_input(report)) == report
    assert blame("task.failed", report.terminal, report.host_fault) == HOST_FAULT


@pytest.mark.parametrize(
    "exc",
    [TaskFailure("source missing", retryable=False), TaskFailure("try later"), OSError("x")],
)
def test_any_other_failure_is_no_host_fault(exc: Exception) -> None:
    report = outcome(A, "w", _raised(exc))
    assert isinstance(report, c.ReportFailed) and not report.host_fault
    assert blame("task.failed", report.terminal, report.host_fault) is None


def test_older_failures_read_as_no_host_fault() -> None:
    v2 = {"type": "worker.task_failed", "schema_version": 2, "input_id": "i", "workflow_id": "w"}
    assert upcast("commands", "worker.task_failed", v2)["host_fault"] is False
    v1 = {"type": "task.failed", "schema_version": 1, "payload": {"task_id": "t", "reason": "r"}}
    assert upcast("events", "task.failed", v1)["payload"]["host_fault"] is False
