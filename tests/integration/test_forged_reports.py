"""A report bound to its lease even against a worker of the same pool (ADR 74), on the real
broker with real processes: decider, dispatcher, the victim (an SDK worker whose task waits for
a gate file) and the thief (``thief_worker``: an SDK worker of the same pool whose id shares
the victim's assignment partition).

The thief reads the victim's assignment from the partition, cannot open its sealed token, and
reports the task completed with its own producer, as itself and claiming the victim's id. What
proves the fault fired: the thief's log (it read the assignment, failed to open the token,
delivered both reports) and the two ``task.completion_rejected`` events caused by its input
ids. Both are refused with the reason and the worker they name, the one claiming the victim
said to be forged and not held against it; the workflow is still running while the victim
holds the gate (the rejections come after the forgeries, and nothing completed), then the
victim's own report is accepted, the workflow completes, and the audit is clean."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from es_sched.domain.events import Event
from es_sched.kafka.partitioner import partition_for
from es_sched.serialization import sealed, wire
from testkit.kafka import read_to_end
from testkit.runtime import Env, Role, assert_log_invariants, final_status, read_events
from testkit.wait import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.fault]
GATED = "pin.prep"  # the type gated_worker holds until its gate file exists
ONE = {"name": "one_gated", "version": 1, "tasks": [{"name": GATED, "taskReferenceName": "g"}]}
VICTIM = "victim"


def _thief_id(partitions: int) -> str:
    """A worker id whose assignments land on the victim's partition (ADR 5)."""
    home = partition_for(VICTIM.encode(), partitions)
    return next(
        f"thief-{i}"
        for i in range(1000)
        if partition_for(f"thief-{i}".encode(), partitions) == home
    )


def _rejections(events: list[Event]) -> dict[str, Event]:
    return {e.causation_id: e for e in events if e.type == "task.completion_rejected"}


def test_a_report_forged_by_a_worker_of_the_same_pool_is_refused() -> None:
    env = Env(extra={"ES_SCHED_DISPATCH_HEARTBEAT_S": "1", "ES_SCHED_DISPATCH_LEASE_K": "4"})
    env.create()
    env.push(ONE, [{"name": GATED, "retryCount": 0}])
    thief_id = _thief_id(env.settings.dispatch.assignment_partitions)
    gate = Path(tempfile.mkdtemp()) / "open"
    roles = [Role(env, "decider"), Role(env, "dispatcher")]
    victim = Role(
        env,
        VICTIM,
        [VICTIM],
        module="tests.integration.gated_worker",
        GATE_FILE=str(gate),
        TASK_TYPES="lease.unused",
    )
    thief = Role(env, thief_id, [thief_id], module="tests.integration.thief_worker", VICTIM=VICTIM)
    try:
        for r in [*roles, victim, thief]:
            r.wait_log("started", 90)
        [start] = env.submit("one_gated", [{}])
        wf = start.workflow_id
        thief.wait_log("forged 2 reports for", 60)
        task_id = thief.text().split("forged 2 reports for ")[1].split()[0]
        forged = {f"forged-as-thief:{task_id}", f"forged-as-victim:{task_id}"}
        wait_until(
            lambda: forged <= set(_rejections(read_events(env).get(wf, []))),
            60,
            "both forged reports refused",
        )
        assert final_status(read_events(env)[wf]) == "RUNNING"  # the gate still holds it
        gate.touch()
        wait_until(
            lambda: final_status(read_events(env).get(wf, [])) == "COMPLETED",
            60,
            "the victim's own completion",
        )
    finally:
        gate.touch()
        for r in [thief, victim, *roles]:
            r.stop()

    text = thief.text()
    assert f"read {VICTIM}'s assignment of {task_id} (epoch 1)" in text
    assert f"cannot open {VICTIM}'s lease token" in text
    assert f"opened {VICTIM}'s lease token" not in text
    events = read_events(env)[wf]
    [dispatched] = [e for e in events if e.type == "task.dispatched"]
    token = getattr(dispatched.payload, "lease_token", "")
    # What the partition carried: the token sealed, never in clear, opened by the victim alone.
    [raw] = [
        m.value() or b""
        for m in read_to_end(env.topics.assignments)
        if m.key() == VICTIM.encode() and b'"assignment"' in (m.value() or b"")
    ]
    assignment = wire.decode(raw)
    assert isinstance(assignment, wire.Assignment) and token and token.encode() not in raw
    assert sealed.is_sealed(assignment.lease_token)

    rejected = _rejections(events)
    as_thief = rejected[f"forged-as-thief:{task_id}"].payload
    as_victim = rejected[f"forged-as-victim:{task_id}"].payload
    assert getattr(as_thief, "worker_id", "") == thief_id  # the origin, as the report named it
    assert f"epoch 1 on {thief_id}" in getattr(as_thief, "reason", "")
    assert getattr(as_victim, "worker_id", "") == VICTIM  # the claim, and why it is refused:
    reason = getattr(as_victim, "reason", "")
    assert "wrong token" in reason and "forged" in reason
    assert f"not counted against {VICTIM}" in reason
    # The victim's report was accepted: one completion, its output, never the thief's.
    [completed] = [e for e in events if e.type == "task.completed"]
    assert getattr(completed.payload, "output", {}) == {"ran": GATED}
    assert not [e for e in events if e.type == "task.failed"]
    assert [getattr(e.payload, "worker_id", "") for e in events if e.type == "task.started"] == [
        VICTIM
    ]
    assert_log_invariants(env, {wf})
