"""ADR 60: a task attempt's log lines and a failed handler's traceback, bounded by the worker
(``workers.tasklogs``), sent with the outcome (``context.outcome``), copied by the decider onto
``task.completed`` / ``task.failed`` and encoded only when present (``codec.SPARSE``)."""

from __future__ import annotations

import threading
from concurrent.futures import Future
from typing import Any

import pytest

from es_sched.domain import commands as c
from es_sched.domain.events import TaskCompleted, TaskFailed
from es_sched.serialization import wire
from es_sched.serialization.codec import decode_event, decode_input, encode_event, encode_input
from es_sched.workers import tasklogs
from es_sched.workers.context import TaskContext, TaskFailure, outcome
from tests.unit.domain.harness import Driver, task, workflow

pytestmark = pytest.mark.unit
A = wire.Assignment("w1", "wf", "t1", "encode", 1, 1, "tok", "enc", {})


def _lines(*texts: str) -> list[dict[str, Any]]:
    return [tasklogs.line(t) for t in texts]


# -- bounds ---------------------------------------------------------------------------------
def test_bounded_keeps_the_newest_lines_that_fit_and_says_how_many_went() -> None:
    kept = tasklogs.bounded(_lines("a" * 100, "b" * 100, "c" * 100, "d" * 100), 250)
    assert [x["log"][:1] for x in kept] == ["[", "c", "d"]
    assert kept[0]["log"].startswith("[2 earlier lines dropped: over 250 characters")
    assert kept[0]["at"] == kept[1]["at"]
    few = _lines("x", "y")
    assert tasklogs.bounded(few, 250) == few


def test_a_line_longer_than_the_bound_is_cut_not_dropped() -> None:
    (only,) = tasklogs.bounded(_lines("z" * 1000), 300)
    assert len(only["log"]) == 300 and only["log"].endswith(tasklogs.CUT)


def test_the_context_log_drops_its_oldest_lines_past_the_bound() -> None:
    ctx = TaskContext(A, "w1", reporter=None, log_max_chars=256)  # type: ignore[arg-type]
    for n in range(40):
        ctx.log(f"line {n:02d} " + "." * 20)  # 28 characters each: 9 fit in 256
    lines = [x["log"] for x in ctx.logs.lines()]
    assert lines[0].startswith("[31 earlier lines dropped")
    assert lines[1:] == [f"line {n:02d} " + "." * 20 for n in range(31, 40)]
    assert sum(len(x) for x in lines[1:]) <= 256


def test_the_context_log_takes_lines_from_several_threads_and_no_nul() -> None:
    ctx = TaskContext(A, "w1", reporter=None, log_max_chars=65536)  # type: ignore[arg-type]

    def write(k: int) -> None:
        for n in range(200):
            ctx.log(f"{k}:{n}")

    threads = [threading.Thread(target=write, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ctx.log("a\x00b")
    lines = ctx.logs.lines()
    assert len(lines) == 801 and lines[-1]["log"] == "a\ufffdb"
    assert all(x["at"].endswith("Z") for x in lines)


def test_a_traceback_keeps_its_last_characters() -> None:
    def deep(n: int) -> None:
        if n == 0:
            raise ValueError("bottom of the stack")
        deep(n - 1)

    try:
        deep(50)
    except ValueError as exc:
        whole = tasklogs.traceback_of(exc, 65536)
        cut = tasklogs.traceback_of(exc, 400)
    assert whole.startswith("Traceback (most recent call last):")
    assert len(cut) == 400 and cut.startswith(tasklogs.CUT)
    assert cut.endswith("ValueError: bottom of the stack\n") and whole.endswith(cut[1:])


# -- the outcome a handler's end makes --------------------------------------------------------
def _ended(fn: Any) -> Future[Any]:
    future: Future[Any] = Future()
    try:
        future.set_result(fn())
    except Exception as exc:  # noqa: BLE001 - what a handler raises is the point here
        future.set_exception(exc)
    return future


def _raise(exc: Exception) -> Any:
    def fn() -> Any:
        raise exc

    return fn


def test_an_unexpected_exception_fails_with_its_traceback_and_the_logs() -> None:
    logs = _lines("probing", "encoding")
    report = outcome(A, "w1", _ended(_raise(KeyError("codec"))), True, logs, 8192)
    assert isinstance(report, c.ReportFailed) and not report.terminal
    assert report.reason == "KeyError: 'codec'" and report.logs == logs
    assert report.traceback.startswith("Traceback") and "in fn" in report.traceback
    assert report.traceback.endswith("KeyError: 'codec'\n")


def test_a_task_failure_raised_on_purpose_has_no_traceback_unless_it_chains() -> None:
    plain = outcome(A, "w1", _ended(_raise(TaskFailure("bad input", False))), True, [], 8192)
    assert isinstance(plain, c.ReportFailed) and plain.terminal and plain.traceback == ""

    def chained() -> Any:
        try:
            _ = dict[str, int]()["missing"]
        except KeyError as exc:
            raise TaskFailure("lookup failed") from exc

    report = outcome(A, "w1", _ended(chained), True, [], 8192)
    assert isinstance(report, c.ReportFailed) and "KeyError: 'missing'" in report.traceback
    assert report.traceback.rstrip().endswith("lookup failed")


def test_a_completion_carries_the_logs() -> None:
    logs = _lines("done")
    report = outcome(A, "w1", _ended(lambda: {"ok": 1}), True, logs, 8192)
    assert isinstance(report, c.ReportCompleted) and report.logs == logs


# -- the decider and the records -----------------------------------------------------------
FLOW = workflow(task("enc", "encode"), name="logged")
TASKDEFS = [{"name": "encode", "retryCount": 0}]


def _dispatched() -> tuple[Driver, dict[str, Any]]:
    d = Driver(FLOW, taskdefs=TASKDEFS)
    t = d.latest("enc")
    lease: dict[str, Any] = dict(
        task_id=t.task_id, attempt=1, worker_id="w1", lease_epoch=1, lease_token="a"
    )
    d.send(c.DispatchTask("in-d", d.workflow_id, **lease))
    return d, lease


def test_the_decider_copies_logs_and_traceback_onto_the_outcome_events() -> None:
    logs = _lines("a line")
    d, lease = _dispatched()
    out = d.send(
        c.ReportFailed(
            "in-f", d.workflow_id, **lease, reason="boom", logs=logs, traceback="Traceback..."
        )
    )
    failed = out[0].payload
    assert failed == TaskFailed(lease["task_id"], "boom", False, {}, logs, "Traceback...")
    d, lease = _dispatched()
    out = d.send(c.ReportCompleted("in-c", d.workflow_id, **lease, output={"x": 1}, logs=logs))
    assert out[0].payload == TaskCompleted(lease["task_id"], {"x": 1}, logs)


def test_outcomes_without_logs_encode_as_before_and_with_them_round_trip() -> None:
    bare = c.ReportFailed("in-f", "wf", task_id="t", reason="r", started=True)
    assert b"logs" not in encode_input(bare) and b"traceback" not in encode_input(bare)
    full = c.ReportFailed("in-f", "wf", task_id="t", reason="r", logs=_lines("x"), traceback="tb")
    assert decode_input(encode_input(full)) == full
    assert decode_input(encode_input(bare)) == bare
    d, lease = _dispatched()
    (done, *_) = d.send(c.ReportCompleted("in-c", d.workflow_id, **lease, output={"x": 1}))
    assert b'"payload":{"output":{"x":1},"task_id"' in encode_event(done)
    assert decode_event(encode_event(done)) == done
    d, lease = _dispatched()
    logged = c.ReportFailed("in-f", d.workflow_id, **lease, reason="r", logs=_lines("x"))
    (failed, *_) = d.send(logged)
    assert b'"logs":[{"at"' in encode_event(failed) and b"traceback" not in encode_event(failed)
    assert decode_event(encode_event(failed)) == failed
