"""Bounded decider state (issue 13 item 2, ADR 18) with a real decider over the real broker.

Tiny workflows (one SIMPLE task, completed by the test's scripted worker) run with a retention
of one second beside two that wait (a WAIT task). What proves the retirement happened is the
changelog itself: each finished workflow's key ends in a tombstone and has an ended marker.
A restarted decider then restores only the two live states (its restore log counts them),
answers a late cancel of a retired workflow from the marker (``es-sched cancel --wait`` exits 1
naming the end), and a duplicate StartWorkflow of it (the same command id) starts nothing: a
sentinel cancel produced after it on the same key is answered, and no second history exists.
``es-sched replay --verify --against changelog`` finds every marker equal to the fold of its
history. The waiting workflows are signalled to completion, and the log invariants hold.
"""

from __future__ import annotations

import re
import uuid

import orjson
import pytest

from es_sched.domain import commands as c
from testkit.cli import es_sched
from testkit.kafka import read_to_end
from testkit.runtime import (
    Env,
    Role,
    Worker,
    assert_log_invariants,
    read_events,
    roles,
)
from testkit.wait import wait_until

pytestmark = pytest.mark.integration

TINY = {
    "name": "bounded_tiny",
    "version": 1,
    "tasks": [{"name": "tiny", "taskReferenceName": "tiny", "type": "SIMPLE"}],
}
HOLD = {
    "name": "bounded_hold",
    "version": 1,
    "tasks": [{"name": "hold", "taskReferenceName": "hold", "type": "WAIT"}],
}
FINISHED = 20
ENDED_KEY_PREFIX = "~ended:"  # serialization.changelog; spelt out: the test reads the topic raw
RESTORED = re.compile(
    r"restored partition \d+: \d+ records, (\d+) live states \((\d+) resting\), (\d+) ended"
)


def changelog(env: Env) -> tuple[dict[str, bytes | None], dict[str, str]]:
    """The changelog's latest value per workflow key, and the ended markers' statuses."""
    latest: dict[str, bytes | None] = {}
    ended: dict[str, str] = {}
    for msg in read_to_end(env.topics.changelog, bootstrap=env.bootstrap):
        key = (msg.key() or b"").decode()
        if key.startswith(ENDED_KEY_PREFIX):
            ended[key.removeprefix(ENDED_KEY_PREFIX)] = orjson.loads(msg.value() or b"{}")["status"]
        elif not key.startswith("~"):
            latest[key] = msg.value()
    return latest, ended


def restored_counts(decider: Role, partitions: int) -> tuple[int, int, int] | None:
    """(live states, of them resting, ended markers) over the restore lines of every partition."""
    found = RESTORED.findall(decider.text())
    if len(found) < partitions:
        return None
    live, resting, ended = (sum(int(line[i]) for line in found) for i in range(3))
    return live, resting, ended


def test_finished_workflows_are_retired_and_late_inputs_answered_from_the_marker() -> None:
    env = Env(extra={"ES_SCHED_RUN_RETAIN_FINISHED_S": "1"})
    env.create()
    env.push(TINY, [])
    env.push(HOLD, [])
    tiny_cmds = [f"tiny-{uuid.uuid4().hex}" for _ in range(FINISHED)]
    with roles(env, "decider"), Worker(env):
        tiny = env.submit("bounded_tiny", [{"i": i} for i in range(FINISHED)], tiny_cmds)
        holds = env.submit("bounded_hold", [{}, {}])
        tiny_ids = {s.workflow_id for s in tiny}

        def retired() -> bool:
            latest, ended = changelog(env)
            return all(
                latest.get(wf, b"") is None and ended.get(wf) == "COMPLETED" for wf in tiny_ids
            )

        wait_until(retired, 90, "a tombstone and a COMPLETED marker for every tiny workflow")
        latest, _ = changelog(env)
        assert all(latest[s.workflow_id] is not None for s in holds), "live states are kept"

    decider = Role(env, "decider")  # a restart: restores from the changelog alone
    try:
        decider.wait_log("started")
        wait_until(
            lambda: restored_counts(decider, env.partitions) is not None,
            60,
            "the restored decider's restore lines",
        )
        assert restored_counts(decider, env.partitions) == (2, 0, FINISHED)  # waiting: decoded

        gone = tiny[0]
        seq = len(read_events(env)[gone.workflow_id])
        done = es_sched("cancel", gone.workflow_id, "--wait", "20", env=env.vars)
        assert done.returncode == 1, done.stdout + done.stderr
        assert (
            f"rejected: workflow ended COMPLETED at seq {seq} and its state was retired "
            "after the retention period: workflow.cancel refused"
        ) in done.stderr

        # The same command id again: nothing starts. A sentinel after it, on its key, proves
        # the decider read past it.
        env.submit("bounded_tiny", [{"i": 0}], [tiny_cmds[0]])
        env.send([c.CancelWorkflow("sentinel-cancel", gone.workflow_id)], env.topics.commands)

        def sentinel_answered() -> bool:
            events = read_events(env).get(gone.workflow_id, [])
            return any(e.causation_id == "sentinel-cancel" for e in events)

        wait_until(sentinel_answered, 60, "the sentinel cancel's refusal")
        history = [e for e in read_events(env)[gone.workflow_id] if e.seq > 0]
        assert len(history) == seq and sum(e.type == "workflow.started" for e in history) == 1

        # The auditor folds every history and checks each retired workflow's marker against it.
        audit = es_sched("replay", "--verify", "--against", "changelog", "--json", env=env.vars)
        assert audit.returncode == 0, audit.stdout + audit.stderr
        report = orjson.loads(audit.stdout)
        assert (report["workflows"], report["mismatches"]) == (FINISHED + 2, 0)

        env.send(
            [c.SignalWorkflow(f"signal-{s.workflow_id}", s.workflow_id) for s in holds],
            env.topics.commands,
        )

        def holds_completed() -> bool:
            events = read_events(env)
            return all(events[s.workflow_id][-1].type == "workflow.completed" for s in holds)

        wait_until(holds_completed, 60, "the restored waiting workflows to complete")
    finally:
        decider.stop()
    assert_log_invariants(env, tiny_ids | {s.workflow_id for s in holds}, "COMPLETED")


def test_a_restored_decider_keeps_ended_states_resting_and_decodes_one_an_input_names() -> None:
    """ADR 52, default retention (a day): a restarted decider restores finished workflows
    without decoding them (its restore lines count them resting), and a late cancel of one is
    answered from the whole state, decoded then: a ``command.rejected`` in its history at the
    next seq ("workflow is COMPLETED"), where an answer from a marker would be a refusal outside
    the history (seq 0). A second cancel is answered the same way from the decoded state."""
    env = Env()
    env.create()
    env.push(TINY, [])
    with roles(env, "decider"), Worker(env):
        tiny = env.submit("bounded_tiny", [{"i": i} for i in range(4)])
        ids = {s.workflow_id for s in tiny}

        def completed() -> bool:
            events = read_events(env)
            return all(
                events.get(wf, [])[-1:] and events[wf][-1].type == "workflow.completed"
                for wf in ids
            )

        wait_until(completed, 90, "the four tiny workflows to complete")

    decider = Role(env, "decider")  # a restart: restores from the changelog alone
    try:
        decider.wait_log("started")
        wait_until(
            lambda: restored_counts(decider, env.partitions) is not None,
            60,
            "the restored decider's restore lines",
        )
        assert restored_counts(decider, env.partitions) == (4, 4, 0)
        late = tiny[0].workflow_id
        seq = len(read_events(env)[late])
        for n in range(2):
            env.send([c.CancelWorkflow(f"late-cancel-{n}", late)], env.topics.commands)

        def answered() -> bool:
            return sum(e.type == "command.rejected" for e in read_events(env)[late]) == 2

        wait_until(answered, 60, "the late cancels' rejections in the history")
        rejected = [e for e in read_events(env)[late] if e.type == "command.rejected"]
        assert [(e.seq, e.causation_id) for e in rejected] == [
            (seq + 1, "late-cancel-0"),
            (seq + 2, "late-cancel-1"),
        ]
        assert all("workflow is COMPLETED" in str(e.payload) for e in rejected)
    finally:
        decider.stop()
    assert_log_invariants(env, ids, "COMPLETED")
