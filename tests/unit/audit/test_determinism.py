"""I5: decide, run again over the recorded inputs (with the recorded ``now`` and ids), gives
the recorded events; a core rule changed after the fact, a missing input or an id the core
did not draw from its IdSource is found, with the workflow id and the offsets."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from es_sched.audit.check import check
from es_sched.audit.determinism import recorded_ids
from es_sched.audit.log import Log, Report
from es_sched.domain import commands as c
from es_sched.domain import retry, task_inputs
from es_sched.domain.events import TaskCompleted, TaskFailed, TaskScheduled, WorkflowRejected
from es_sched.domain.learned import CUT_BY_TIMEOUT, RunStats
from es_sched.domain.refusals import refusal
from es_sched.domain.retention import answer_ended, marker
from es_sched.domain.scripts import recorded_breach
from es_sched.scripting.quickjs import QuickJsEngine
from testkit.core import rerun_with_python_core
from tests.unit.audit.recorded import COMMANDS, EVENTS, TWO_TASKS, Recording, layout, recorded
from tests.unit.domain import harness
from tests.unit.domain.harness import SCRIPTS, task, workflow

RETRIED = {
    "name": "enc",
    "retryCount": 2,
    "retryLogic": "EXPONENTIAL_BACKOFF",
    "retryDelaySeconds": 5,
}
RICH = workflow(
    task("a", "enc"),
    task(
        "pick",
        type_="INLINE",
        inputParameters={"evaluatorType": "javascript", "expression": "$.n * 2", "n": 21},
    ),
    task("child", type_="SUB_WORKFLOW", subWorkflowParam={"name": "kid", "version": 1}),
    name="rich",
)


def run(log: Log) -> Report:
    return check(log, idle=False, scripts=SCRIPTS)


def i5(report: Report) -> list[str]:
    return [v.line() for v in report.violations if v.invariant == "I5"]


def retried_log() -> tuple[Recording, Log]:
    """A task that fails, waits for its retry timer (the recorded ``now`` matters), then
    completes; and a second task that completes."""
    d = Recording(TWO_TASKS, taskdefs=[RETRIED])
    d.report("a", "FAILED", reason="boom")
    d.fire("retry", "a")  # not due yet: no event, not replayed
    d.advance(5)
    d.fire("retry", "a")
    d.report("a")
    d.report("b")
    assert d.st.status == "COMPLETED"
    return d, recorded(d)


def test_recorded_decisions_replay_exactly() -> None:
    _, log = retried_log()
    rich = Recording(RICH, "start-rich")
    rich.report("a")  # the INLINE runs, a child is requested (an id from the IdSource)
    cancel = c.CancelWorkflow("cancel-x", "nobody")
    answer = refusal(cancel, rich.now)
    assert answer is not None
    log = layout(
        [*(le.event for le in log.events), *rich.events, answer],
        [*(i.inp for i in log.inputs if i.inp is not None), *rich.sent, cancel],
    )
    report = run(log)
    assert report.ok, [v.line() for v in report.violations]
    assert report.counts["workflows"] == 2 and report.counts["refusals"] == 1


def test_a_start_refused_for_its_definition_replays() -> None:
    d = Recording(TWO_TASKS)
    start = d.sent[0]
    assert isinstance(start, c.StartWorkflow)
    bare = dataclasses.replace(start, definition=None)  # the registry knew none
    answer = refusal(bare, d.now)
    assert answer is not None
    assert run(layout([answer], [bare])).ok


def test_a_changed_backoff_rule_fails_replay(monkeypatch: pytest.MonkeyPatch) -> None:
    if rerun_with_python_core(f"{__file__}::test_a_changed_backoff_rule_fails_replay"):
        return  # replacing a compiled core's function changes nothing its callers do
    d, log = retried_log()
    assert run(log).ok
    before = retry.retry_delay
    monkeypatch.setattr(retry, "retry_delay", lambda *a: 2 * before(*a))  # "a core change"
    found = i5(run(log))
    failed = next(le for le in log.events if le.event.type == "task.failed")
    report = next(i for i in log.inputs if isinstance(i.inp, c.ReportFailed))
    assert found == [
        f"I5 {d.workflow_id} {EVENTS}[0]@{failed.at.offset + 1}, {report.at}: worker.task_failed "
        f"{report.inp.input_id} decided again gives 2 event(s) where the log has 2 (seq "  # type: ignore[union-attr]
        f"{failed.event.seq}..{failed.event.seq + 1}); first difference at seq "
        f"{failed.event.seq + 1} task.retry_scheduled: payload.delay_seconds recorded 5.0, "
        "replayed 10.0"
    ], found


def test_a_changed_fencing_rule_fails_replay(monkeypatch: pytest.MonkeyPatch) -> None:
    if rerun_with_python_core(f"{__file__}::test_a_changed_fencing_rule_fails_replay"):
        return  # replacing a compiled core's function changes nothing its callers do
    d = Recording(TWO_TASKS).finish()
    log = recorded(d)
    rule = task_inputs.report

    def accept_everything(st: Any, inp: Any) -> Any:
        out = rule(st, inp)
        return [
            TaskCompleted(p.task_id, {"changed": True}) if isinstance(p, TaskCompleted) else p
            for p in out
        ]

    monkeypatch.setattr(task_inputs, "report", accept_everything)
    found = i5(run(log))
    assert len(found) == 2 and all(
        "payload.output.changed recorded None, replayed True" in f for f in found
    ), found
    assert all(f.startswith(f"I5 {d.workflow_id} {EVENTS}[0]@") for f in found)


def test_an_input_missing_from_the_topics_is_found() -> None:
    d = Recording(TWO_TASKS).finish()
    log = recorded(d)
    gone = next(i for i in log.inputs if isinstance(i.inp, c.ReportCompleted))
    log.inputs.remove(gone)
    first = next(le for le in log.events if le.event.causation_id == gone.inp.input_id)  # type: ignore[union-attr]
    assert i5(run(log)) == [
        f"I5 {d.workflow_id} {first.at}: 2 event(s) from seq {first.event.seq} were caused by "
        f"input {gone.inp.input_id}, which is not in the input topics"  # type: ignore[union-attr]
    ]


def test_ids_are_handed_back_as_recorded_then_unrecorded() -> None:
    d = Recording(TWO_TASKS)
    scheduled = [e for e in d.events if isinstance(e.payload, TaskScheduled)]
    ids = recorded_ids(d.events)
    assert [ids(), ids()] == [scheduled[0].payload.task_id, "unrecorded-id-1"]  # type: ignore[attr-defined]


def test_an_event_the_input_topics_do_not_explain_is_found() -> None:
    d = Recording(TWO_TASKS).finish()
    log = recorded(d)
    start = log.inputs[0]
    assert start.at.topic == COMMANDS and isinstance(start.inp, c.StartWorkflow)
    other = dataclasses.replace(start.inp, input={"changed": 1})
    log.inputs[0] = dataclasses.replace(start, inp=other)
    found = i5(run(log))
    assert len(found) == 1 and "payload.input.changed recorded None, replayed 1" in found[0]


def test_a_late_command_answered_from_a_retired_workflows_marker_replays() -> None:
    """ADR 18: after retirement the decider answers from the ended marker, not the state; the
    replay must decide that answer the same way, and a different answer still fails."""
    d, log = retried_log()
    late = c.CancelWorkflow("late-cancel", d.st.workflow_id)
    answer = answer_ended(marker(d.st), late, d.now)
    assert len(answer) == 1
    inputs = [*(i.inp for i in log.inputs if i.inp is not None), late]
    assert run(layout([*(le.event for le in log.events), *answer], inputs)).ok
    payload = answer[0].payload
    assert isinstance(payload, WorkflowRejected)
    wrong = dataclasses.replace(answer[0], payload=dataclasses.replace(payload, reason="made up"))
    lines = i5(run(layout([*(le.event for le in log.events), wrong], inputs)))
    assert len(lines) == 1 and "reason" in lines[0], lines


# -- dynamic timeouts (ADR 65) ---------------------------------------------------------------
LEARNED_DEF = {
    "name": "enc",
    "retryCount": 1,
    "retryDelaySeconds": 0,
    "timeoutSeconds": 3600,
    "timeoutPolicy": "RETRY",
    "dynamicTimeout": {"floorSeconds": 1, "ceilingSeconds": 600, "minSamples": 5},
}


def _proposal(p95: float, samples: int = 40) -> RunStats:
    return RunStats("enc", "any", "2026-03-01T11:55:00Z", samples, p95 / 2, p95, p95, 0, 0, 0, 0)


def learned_log() -> tuple[Recording, Log]:
    """``enc`` runs with a learned timeout (P95 2 s: 2.4 s), times out, and its retry is
    scheduled after a new window's proposal (P95 5 s: 6 s); ``pack`` has no policy."""
    figures: list[RunStats | None] = [_proposal(2.0)]
    d = Recording(TWO_TASKS, taskdefs=[LEARNED_DEF], learned=lambda *_: figures[-1])
    d.report("a", "STARTED")
    d.advance(2.4)
    figures.append(_proposal(5.0))  # the view moved on: the fire must not read it
    d.fire("total_timeout", "a")
    d.report("a")
    d.report("b")
    assert d.st.status == "COMPLETED"
    chosen = [e.payload.timeout for e in d.events if isinstance(e.payload, TaskScheduled)]
    assert [t.get("timeout_seconds") for t in chosen] == [2.4, 6.0, None]
    return d, recorded(d)


def test_learned_timeouts_replay_from_the_recorded_figures() -> None:
    _, log = learned_log()
    assert any(le.event.type == "task.timed_out" for le in log.events)
    report = run(log)
    assert report.ok, [v.line() for v in report.violations]


def forge_timeout(log: Log, change: dict[str, Any], which: int = 0) -> Any:
    """Change the recorded ``timeout`` of the ``which``-th task.scheduled that has one; the
    position of the forged record in the log."""
    at = [
        i
        for i, le in enumerate(log.events)
        if isinstance(le.event.payload, TaskScheduled) and le.event.payload.timeout
    ][which]
    le = log.events[at]
    payload = le.event.payload
    assert isinstance(payload, TaskScheduled)
    forged = dataclasses.replace(payload, timeout={**payload.timeout, **change})
    log.events[at] = dataclasses.replace(le, event=dataclasses.replace(le.event, payload=forged))
    return le.at


@pytest.mark.parametrize(
    ("change", "shown"),
    [
        pytest.param({"timeout_seconds": 3600.0}, "payload.timeout.timeout_seconds", id="value"),
        pytest.param({"source": "static"}, "payload.timeout.", id="source"),
    ],
)
def test_a_tampered_learned_timeout_fails_replay(change: dict[str, Any], shown: str) -> None:
    d, log = learned_log()
    at = forge_timeout(log, change)
    found = i5(run(log))
    assert found and found[0].startswith(f"I5 {d.workflow_id} {at}") and shown in found[0], found


def test_a_timeout_fallen_back_for_runs_cut_replays_and_its_count_is_checked() -> None:
    """The retry of a run cut at its learned 2.4 s is scheduled while the window shows 3 of
    10 runs cut (``timeouts.censored``): the static hour, recorded with the count."""
    cut = dataclasses.replace(_proposal(2.0, samples=7), failures_by_reason={CUT_BY_TIMEOUT: 3})
    figures: list[RunStats | None] = [_proposal(2.0)]
    d = Recording(TWO_TASKS, taskdefs=[LEARNED_DEF], learned=lambda *_: figures[-1])
    d.report("a", "STARTED")
    d.advance(2.4)
    figures.append(cut)
    d.fire("total_timeout", "a")
    d.report("a")
    d.report("b")
    chosen = [e.payload.timeout for e in d.events if isinstance(e.payload, TaskScheduled)]
    assert [(t.get("source"), t.get("censored")) for t in chosen[:2]] == [
        ("learned", None),
        ("static", 3),
    ]
    log = recorded(d)
    assert run(log).ok
    # a cut-short timeout recorded beside the count that forbids it
    forge_timeout(log, {"timeout_seconds": 5.0}, which=-1)
    found = i5(run(log))
    assert found and "payload.timeout." in found[0], found


def reviewed_log() -> Log:
    """ADR 71: ``a`` retries with the inputs its policy changes, parks for review after its
    last attempt, and an operator's retry with edited input completes it."""
    policy = {
        "name": "enc",
        "retryCount": 2,
        "retryDelaySeconds": 0,
        "retryInputChanges": [{"preset": "veryfast"}, {"codec": "h264"}],
        "onExhausted": "REVIEW",
    }
    d = Recording(TWO_TASKS, taskdefs=[policy])
    for _ in range(3):
        d.report("a", "FAILED", reason="boom")
    assert d.latest("a").status == "PARKED_FOR_REVIEW"
    parked = d.latest("a").task_id
    d.send(
        c.ReviewTask("review-1", d.workflow_id, task_id=parked, decision="retry", input={"x": 1})
    )
    d.report("a")
    d.report("b")
    assert d.st.status == "COMPLETED"
    return recorded(d)


def test_inputs_changed_per_attempt_and_a_review_replay_exactly() -> None:
    report = run(reviewed_log())
    assert report.ok, [v.line() for v in report.violations]


def test_a_changed_input_change_rule_fails_replay(monkeypatch: pytest.MonkeyPatch) -> None:
    if rerun_with_python_core(f"{__file__}::test_a_changed_input_change_rule_fails_replay"):
        return  # replacing a compiled core's function changes nothing its callers do
    log = reviewed_log()
    monkeypatch.setattr(retry, "input_for_attempt", lambda inputs, changes, attempt: dict(inputs))
    found = i5(run(log))
    assert found and "task.scheduled: payload.input" in found[0], found


# A finite script that runs well past 1 ms of CPU time and well within 10 s.
BUSY = "let s = 0; for (let i = 0; i < 3e6; i++) { s += i % 7; } s"
BUSY_INPUTS = {"evaluatorType": "javascript", "expression": BUSY}
BUSY_WORKFLOW = workflow(
    task("calc", type_="INLINE", inputParameters=BUSY_INPUTS), task("b", "pack"), name="busy"
)


def breached_log(monkeypatch: pytest.MonkeyPatch) -> Log:
    """ADR 76: ``calc`` breaches its CPU time limit on a slow (1 ms) live decider."""
    monkeypatch.setattr(harness, "SCRIPTS", QuickJsEngine(time_limit_ms=1))
    d = Recording(BUSY_WORKFLOW, "start-busy")
    monkeypatch.setattr(harness, "SCRIPTS", SCRIPTS)
    failed = [e.payload for e in d.events if isinstance(e.payload, TaskFailed)]
    assert [recorded_breach(f.reason) is not None for f in failed] == [True], failed
    assert d.st.status == "FAILED"
    return recorded(d)


def test_a_time_limit_breach_replays_from_the_record(monkeypatch: pytest.MonkeyPatch) -> None:
    log = breached_log(monkeypatch)
    roomy = QuickJsEngine(time_limit_ms=10_000)  # this replay's machine finishes the script
    assert roomy.evaluate(BUSY, BUSY_INPUTS).ok
    report = check(log, idle=False, scripts=roomy)
    assert report.ok, [v.line() for v in report.violations]


def test_a_breach_the_record_does_not_name_runs_again(monkeypatch: pytest.MonkeyPatch) -> None:
    log = breached_log(monkeypatch)
    at = next(i for i, le in enumerate(log.events) if isinstance(le.event.payload, TaskFailed))
    le = log.events[at]
    payload = le.event.payload
    assert isinstance(payload, TaskFailed)
    other = payload.reason[:-17] + "0" * 16 + "]"  # a fingerprint of no evaluation in the run
    forged = dataclasses.replace(payload, reason=other)
    log.events[at] = dataclasses.replace(le, event=dataclasses.replace(le.event, payload=forged))
    found = i5(check(log, idle=False, scripts=QuickJsEngine(time_limit_ms=10_000)))
    assert found and found[0].startswith(f"I5 {le.event.workflow_id}"), found
