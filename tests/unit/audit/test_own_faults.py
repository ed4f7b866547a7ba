"""I6 over hand-made logs: a blacklisting whose cited failures are the worker's own faults in
the log passes; one citing an input's fault (a terminal failure), an ordinary failure or a
task the log does not hold is found, with the worker and the config record's offset."""

from __future__ import annotations

from datetime import timedelta

import pytest

from es_sched.audit.invariants import own_faults
from es_sched.audit.log import At, Log, LoggedBlacklisting, LoggedEvent, LoggedInput
from es_sched.blacklist import HOST_FAULT, LEASE_EXPIRED, Blacklisting, Failure
from es_sched.domain import commands as c
from es_sched.domain.events import Event, LeaseExpired, Payload, TaskFailed
from tests.unit.domain.harness import T0

pytestmark = pytest.mark.unit

CONFIG = At("p.config", 0, 7)


def event(n: int, payload: Payload) -> LoggedEvent:
    e = Event(f"e{n}", "wf", n, T0, f"cause{n}", "wf", payload)
    return LoggedEvent(e, At("p.events", 0, n))


def failed_report(task_id: str, worker_id: str, terminal: bool, host: bool) -> LoggedInput:
    report = c.ReportFailed(
        workflow_id="wf",
        input_id=f"r-{task_id}",
        task_id=task_id,
        worker_id=worker_id,
        reason="disk",
        terminal=terminal,
        host_fault=host,
    )
    return LoggedInput(report, At("p.task-results", 0, 0), "wf")


def blacklisted(*failures: tuple[str, str]) -> LoggedBlacklisting:
    cited = tuple(Failure(task, "why", T0, fault) for task, fault in failures)
    b = Blacklisting("w1", "media", T0, T0 + timedelta(seconds=300), cited, 6, "dispatcher-0")
    return LoggedBlacklisting(b, CONFIG)


def test_the_workers_own_faults_pass() -> None:
    log = Log(
        events=[
            event(1, TaskFailed("t1", "disk not writable", False, host_fault=True)),
            event(2, LeaseExpired("t2", 1)),
        ],
        inputs=[failed_report("t3", "w1", terminal=False, host=True)],
        blacklistings=[blacklisted(("t1", HOST_FAULT), ("t2", LEASE_EXPIRED), ("t3", HOST_FAULT))],
    )
    assert own_faults(log) == []


def test_an_inputs_fault_an_ordinary_failure_or_an_unknown_task_is_found() -> None:
    log = Log(
        events=[
            event(1, TaskFailed("bad-input", "no such file", True, host_fault=True)),
            event(2, TaskFailed("flaky", "timeout calling S3", False)),
        ],
        inputs=[failed_report("other-worker", "w2", terminal=False, host=True)],
        blacklistings=[
            blacklisted(
                ("bad-input", HOST_FAULT),  # terminal: the input's, even called a host fault
                ("flaky", HOST_FAULT),  # an ordinary retryable failure blames no one
                ("missing", LEASE_EXPIRED),  # no expiry of it in the log
                ("other-worker", HOST_FAULT),  # another worker's report
            )
        ],
    )
    found = own_faults(log)
    assert [v.invariant for v in found] == ["I6"] * 4
    assert {v.workflow_id for v in found} == {"worker w1"}
    assert all(v.at == (CONFIG,) for v in found)
    assert [v.message.split(" (")[0] for v in found] == [
        "blacklisted for task bad-input",
        "blacklisted for task flaky",
        "blacklisted for task missing",
        "blacklisted for task other-worker",
    ]


def test_no_blacklisting_nothing_to_check() -> None:
    assert own_faults(Log(events=[event(1, TaskFailed("t", "x", True))])) == []
