"""I1, I2 and I3 over hand-made logs: a clean log passes, and each kind of corruption is found
with the workflow id and the offsets it concerns."""

from __future__ import annotations

import dataclasses

from es_sched.audit.check import check
from es_sched.audit.log import At, LoggedEvent, LoggedInput, Report
from es_sched.domain import commands as c
from es_sched.domain.events import Event, TaskCompleted
from es_sched.domain.ids import event_id
from es_sched.domain.refusals import refusal
from tests.unit.audit.recorded import (
    COMMANDS,
    EVENTS,
    RESULTS,
    TWO_TASKS,
    Recording,
    layout,
    recorded,
)
from tests.unit.domain.harness import SCRIPTS, T0


def run(log: object, idle: bool = True) -> Report:
    return check(log, idle=idle, scripts=SCRIPTS)  # type: ignore[arg-type]


def lines(report: Report, invariant: str) -> list[str]:
    return [v.line() for v in report.violations if v.invariant == invariant]


def refused_cancel() -> tuple[c.Input, Event]:
    """A cancel of a workflow that does not exist, and its refusal outside any history."""
    cancel = c.CancelWorkflow("cancel-x", "nobody")
    answer = refusal(cancel, T0)
    assert answer is not None
    return cancel, answer


def test_a_clean_log_has_no_violation() -> None:
    done, running = Recording(TWO_TASKS).finish(), Recording(TWO_TASKS, "start-2")
    cancel, answer = refused_cancel()
    log = layout([*done.events, answer, *running.events], [*done.sent, cancel, *running.sent])
    report = run(log, idle=False)
    assert report.ok, [v.line() for v in report.violations]
    assert report.counts["refusals"] == 1 and report.counts["workflows"] == 2
    assert [v.line() for v in report.info] == [
        f"I1 {running.workflow_id} {EVENTS}[0]@10: workflow is RUNNING at seq 2, with no "
        "terminal event"
    ]


# -- I1 ---------------------------------------------------------------------------------------
def test_a_start_without_an_answer_is_lost_work() -> None:
    d = Recording(TWO_TASKS)
    log = layout([], d.sent)
    assert lines(run(log), "I1") == [
        f"I1 {d.workflow_id} {COMMANDS}[0]@0: StartWorkflow start-1 was accepted but neither "
        "workflow.started nor workflow.rejected answers it (lost)"
    ]


def test_a_refused_start_is_answered() -> None:
    d = Recording(TWO_TASKS)
    start = d.sent[0]
    assert isinstance(start, c.StartWorkflow)
    bare = dataclasses.replace(start, definition=None)
    answer = refusal(bare, d.now)
    assert answer is not None
    assert run(layout([answer], [bare])).ok


def test_an_open_workflow_is_lost_only_when_the_system_is_idle() -> None:
    d = Recording(TWO_TASKS)
    d.report("a")
    log = recorded(d)
    busy, idle = run(log, idle=False), run(log, idle=True)
    assert busy.ok and len(busy.info) == 1
    assert lines(idle, "I1") == [
        f"I1 {d.workflow_id} {EVENTS}[0]@4: workflow is RUNNING at seq 5, with no terminal event"
    ]


def test_a_start_without_its_command_is_invented_work() -> None:
    d = Recording(TWO_TASKS).finish()
    log = recorded(d)
    log.inputs = [i for i in log.inputs if not isinstance(i.inp, c.StartWorkflow)]
    assert (
        f"I1 {d.workflow_id} {EVENTS}[0]@0: workflow.started names command start-1, which "
        "is not in the commands topic (invented work)" in lines(run(log), "I1")
    )


def test_a_dead_lettered_start_expects_no_answer() -> None:
    d = Recording(TWO_TASKS)
    log = layout([], d.sent)
    log.inputs = [dataclasses.replace(log.inputs[0], key="another-key")]  # dead-lettered
    assert run(log).ok


# -- I2 ---------------------------------------------------------------------------------------
def test_an_event_written_twice_is_found_under_both_offsets() -> None:
    d = Recording(TWO_TASKS).finish()
    log = recorded(d)
    again = log.events[3].event
    log.events.append(LoggedEvent(again, At(EVENTS, 0, 8)))
    assert lines(run(log), "I2") == [
        f"I2 {d.workflow_id} {EVENTS}[0]@3, {EVENTS}[0]@8: event {again.event_id} "
        f"({again.type}, seq 4) appears twice"
    ]


def test_a_gap_in_seq_is_found_at_its_offset() -> None:
    d = Recording(TWO_TASKS).finish()
    log = recorded(d)
    del log.events[4]
    found = lines(run(log), "I2")
    assert found == [
        f"I2 {d.workflow_id} {EVENTS}[0]@5: task.dispatched has seq 6 where seq 5 was due (a gap)"
    ], found


def test_a_refusal_inside_a_history_is_found() -> None:
    cancel, answer = refused_cancel()
    stray = dataclasses.replace(answer, seq=1)
    assert lines(run(layout([stray], [cancel])), "I2") == [
        f"I2 nobody {EVENTS}[0]@0: refusal {answer.event_id} has seq 1; a refusal has seq 0 "
        f"and id {answer.event_id}"
    ]


# -- I3 ---------------------------------------------------------------------------------------
def test_an_outcome_from_a_wrong_lease_is_found() -> None:
    d = Recording(TWO_TASKS).finish()
    log = recorded(d)
    [(i, report)] = [
        (i, li) for i, li in enumerate(log.inputs) if isinstance(li.inp, c.ReportCompleted)
    ][:1]
    assert isinstance(report.inp, c.ReportCompleted)
    forged = dataclasses.replace(report.inp, lease_token="stolen", lease_epoch=7)
    log.inputs[i] = dataclasses.replace(report, inp=forged)
    [outcome] = [le for le in log.events if le.event.causation_id == forged.input_id][:1]
    found = lines(run(log), "I3")
    assert found == [
        f"I3 {d.workflow_id} {outcome.at}, {report.at}: task.completed of task "
        f"{forged.task_id} accepted from (worker, epoch, token, attempt) ('w1', 7, 'stolen', 1), "
        f"but the live lease was ('w1', 1, 'tok-{forged.task_id}', 1)"
    ], found
    assert report.at.topic == RESULTS


def test_a_second_outcome_for_one_attempt_is_found() -> None:
    d = Recording(TWO_TASKS)
    d.report("a")
    log = recorded(d)
    first = next(le for le in log.events if isinstance(le.event.payload, TaskCompleted))
    last = log.events[-1].event
    seq = last.seq + 1
    twice = Event(
        event_id(d.workflow_id, seq),
        d.workflow_id,
        seq,
        last.occurred_at,
        first.event.causation_id,
        last.correlation_id,
        first.event.payload,
    )
    log.events.append(LoggedEvent(twice, At(EVENTS, 0, len(log.events))))
    task_id = first.event.payload.task_id  # type: ignore[attr-defined]
    assert (
        f"I3 {d.workflow_id} {first.at}, {EVENTS}[0]@{len(log.events) - 1}: task {task_id} "
        "attempt 1 has a second accepted outcome (task.completed)"
    ) in lines(run(log), "I3")


def test_inputs_the_decider_dead_letters_are_kept_but_never_answered() -> None:
    d = Recording(TWO_TASKS).finish()
    log = recorded(d)
    log.inputs.append(LoggedInput(None, At(COMMANDS, 0, 99), "junk"))
    assert run(log).ok
