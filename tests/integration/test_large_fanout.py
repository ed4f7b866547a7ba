"""A large FORK_JOIN_DYNAMIC on the real broker (issue 13 item 3, ADR 19): 2,000 branches,
each completed by the scripted worker, run to COMPLETED through a real decider process; a
second decider then restores the state from the changelog and decides on it.

What proves the fault fired: the workflow's state is over Kafka's 1 MB record limit (on
today's main the decider cannot write its snapshot and the workflow never completes), so the
changelog holds a chunked snapshot: a head naming its chunk records. Every record of the
changelog and ready topics stays under the limit, and no event but the fork's own (compressed
by the producer: the broker checks the compressed batch). 2,000 branches, the fewest whose
state is over the limit with room to spare, at the CI test scale; 10,000 at
``ES_SCHED_TEST_SCALE=full``. ``bench/fanout.py`` times the core at 1k, 5k and 10k.
"""

from __future__ import annotations

import orjson
import pytest

from es_sched.domain import commands as c
from es_sched.serialization import encode_event
from testkit.kafka import read_to_end
from testkit.runtime import (
    Env,
    Worker,
    assert_log_invariants,
    final_status,
    read_events,
    roles,
)
from testkit.scale import pick
from testkit.wait import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.fault]
BRANCHES = pick(ci=2000, full=10_000)
KAFKA_DEFAULT_MAX = 1_000_000  # librdkafka's message.max.bytes (the broker's: 1,048,588)
FAN = {
    "name": "fan",
    "version": 1,
    "tasks": [
        {
            "name": "fork",
            "taskReferenceName": "fork",
            "type": "FORK_JOIN_DYNAMIC",
            "inputParameters": {"tasks": "${workflow.input.tasks}", "inputs": {}},
            "dynamicForkTasksParam": "tasks",
            "dynamicForkTasksInputParamName": "inputs",
        },
        {"name": "join", "taskReferenceName": "join", "type": "JOIN"},
    ],
}


def _progress(env: Env, wf: str) -> str:
    events = read_events(env).get(wf, [])
    done = sum(e.type == "task.completed" for e in events)
    return f"{wf} COMPLETED: {len(events)} events, {done} tasks completed, {final_status(events)}"


def test_a_fork_of_thousands_of_branches_completes_and_its_chunked_state_is_restored() -> None:
    env = Env(extra={"ES_SCHED_RUN_COMMAND_MAX_BYTES": str(KAFKA_DEFAULT_MAX)})  # the task list
    env.create()
    env.push(FAN, [{"name": "fan.work", "retryCount": 0}])
    tasks = [{"name": "fan.work", "taskReferenceName": f"b{i}"} for i in range(BRANCHES)]
    scale = max(1.0, BRANCHES / 2_000)
    with roles(env, "decider"), Worker(env):
        [started] = env.submit("fan", [{"tasks": tasks}])
        wf = started.workflow_id
        wait_until(
            lambda: final_status(read_events(env).get(wf, [])) == "COMPLETED",
            150 * scale,
            lambda: _progress(env, wf),
        )
    events = read_events(env)[wf]
    assert sum(e.type == "task.completed" for e in events) == BRANCHES + 2  # fork, join

    # The fault fired: the state is over the limit, so its snapshot is chunks and a head.
    changelog = read_to_end(env.topics.changelog)
    heads = [
        orjson.loads(m.value() or b"")
        for m in changelog
        if m.key() == wf.encode() and (m.value() or b"").startswith(b'{"snapshot_chunks"')
    ]
    assert heads and heads[-1]["bytes"] > KAFKA_DEFAULT_MAX, "no chunked snapshot was written"
    for topic in (env.topics.changelog, env.topics.ready):
        sizes = [len(m.value() or b"") + len(m.key() or b"") for m in read_to_end(topic)]
        assert max(sizes) < KAFKA_DEFAULT_MAX, f"{topic}: a record of {max(sizes)} bytes"
    # From 7,500 branches the fork's task.scheduled is over 1 MB of JSON: the broker, which
    # checks the compressed batch, stored it (it is read back here); no other event is.
    large = [e for e in events if len(encode_event(e)) >= KAFKA_DEFAULT_MAX]
    assert all(e.type == "task.scheduled" and e.payload.ref == "fork" for e in large), large  # type: ignore[attr-defined]

    # A new decider restores the chunked state: a late report is refused from that state
    # (without it, the input would be refused outside any history, as for an unknown id).
    branch = next(e for e in events if e.type == "task.scheduled" and e.payload.ref == "b7")  # type: ignore[attr-defined]
    late = c.ReportCompleted(
        "late-report",
        wf,
        task_id=branch.payload.task_id,  # type: ignore[attr-defined]
        attempt=1,
        worker_id="test-worker",
        lease_epoch=1,
        lease_token="tok",
    )
    with roles(env, "decider"):
        env.send([late], env.topics.task_results)
        wait_until(
            lambda: any(e.type == "task.completion_rejected" for e in read_events(env)[wf]),
            60,
            "the restored decider's answer to a late report",
        )
    [answer] = [e for e in read_events(env)[wf] if e.type == "task.completion_rejected"]
    assert answer.seq == len(events) + 1
    assert "already COMPLETED" in answer.payload.reason  # type: ignore[attr-defined]
    head = heads[-1]
    print(
        f"\nfan-out: {BRANCHES} branches, {len(events)} events, a snapshot of "
        f"{head['bytes']} bytes in {head['snapshot_chunks']} chunk records"
    )
    assert_log_invariants(env, {wf})
