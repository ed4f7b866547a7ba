"""Child versions are pinned when the parent starts (issue 12, item 5; ADR 0012): version 2 of
a child pushed while its parent runs changes nothing for that parent, its child runs version 1
with the TaskDefs of the parent's start; a parent started after the push gets version 2. The
same definitions and push, simulated by ``defs simulate``'s engine, run the same children.

Real Kafka, the decider and dispatcher roles as processes, and a worker process
(``gated_worker``) that holds the parent's first task until the test opens its gate.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from es_sched.domain import commands as c
from es_sched.domain.events import Event, WorkflowStarted
from es_sched.domain.ids import workflow_id_for_command
from es_sched.simulate import Simulation
from testkit.runtime import (
    Env,
    Role,
    assert_log_invariants,
    final_status,
    read_events,
    roles,
)
from testkit.wait import wait_until

pytestmark = pytest.mark.integration
PARENT = {
    "name": "pin_parent",
    "version": 1,
    "tasks": [
        {"name": "pin.prep", "taskReferenceName": "prep", "type": "SIMPLE"},
        {
            "name": "pin_child",
            "taskReferenceName": "child",
            "type": "SUB_WORKFLOW",
            "subWorkflowParam": {"name": "pin_child"},
        },  # no version: the latest at the start
    ],
}
CHILD_V1 = {
    "name": "pin_child",
    "version": 1,
    "tasks": [{"name": "pin.v1", "taskReferenceName": "v1_step", "type": "SIMPLE"}],
}
CHILD_V2 = {
    "name": "pin_child",
    "version": 2,
    "tasks": [
        {"name": "pin.v2", "taskReferenceName": "v2_step", "type": "SIMPLE"},
        {"name": "pin.v1", "taskReferenceName": "v1_again", "type": "SIMPLE"},
    ],
}
TASKDEFS = [
    {"name": "pin.prep", "retryCount": 0, "responseTimeoutSeconds": 600},
    {"name": "pin.v1", "retryCount": 0, "responseTimeoutSeconds": 600},
]
LATER_TASKDEFS = [
    {"name": "pin.v1", "retryCount": 4, "responseTimeoutSeconds": 300},
    {"name": "pin.v2", "retryCount": 4, "responseTimeoutSeconds": 300},
]


def _started(events: list[Event]) -> WorkflowStarted:
    payload = events[0].payload
    assert isinstance(payload, WorkflowStarted), events[0].type
    return payload


def _child_of(by_wf: dict[str, list[Event]], parent: str) -> str:
    [child] = [wf for wf, ev in by_wf.items() if _started(ev).parent_workflow_id == parent]
    return child


def _refs(events: list[Event]) -> list[str]:
    return [str(e.payload.ref) for e in events if e.type == "task.scheduled"]  # type: ignore[attr-defined]


def _simulated(runs: int) -> list[dict[str, Any]]:
    """The child of each of ``runs`` parents in the simulator, v2 pushed during the first."""
    script = [{"ref": "prep", "push": [CHILD_V2]}]
    sim = Simulation([PARENT, CHILD_V1], TASKDEFS, script)
    return [sim.run(PARENT, {})["subworkflows"]["child"] for _ in range(runs)]


def test_a_child_pushed_in_version_2_mid_run_runs_version_1_as_simulated(
    tmp_path: Path,
) -> None:
    env = Env()
    env.create()
    env.push(CHILD_V1, TASKDEFS)
    env.push(PARENT, [])
    gate = tmp_path / "gate"
    with roles(env, "decider", "dispatcher"):
        worker = Role(
            env,
            "gated",
            ["gated"],
            module="tests.integration.gated_worker",
            GATE_FILE=str(gate),
            TASK_TYPES="pin.v1,pin.v2",
        )
        try:
            worker.wait_log("started", 60)
            [first] = env.submit("pin_parent", [{}])
            p1 = first.workflow_id

            def holds_prep() -> bool:
                return any(e.type == "task.started" for e in read_events(env).get(p1, []))

            wait_until(holds_prep, 60, "the worker to start the first parent's prep task")
            env.push(CHILD_V2, LATER_TASKDEFS)  # mid-run: the parent is at its first task
            # The fact that the decider's registry holds v2: a start it resolves itself (an
            # upstream service's StartWorkflow without a definition) gets version 2.
            command_id = uuid.uuid4().hex
            probe = workflow_id_for_command(command_id)
            env.send([c.StartWorkflow(command_id, probe, name="pin_child")], env.topics.commands)

            def probe_started() -> bool:
                events = read_events(env).get(probe, [])
                return bool(events) and _started(events).definition.get("version") == 2

            wait_until(probe_started, 60, "the decider to start the probe with version 2")
            [second] = env.submit("pin_parent", [{}])  # a new parent, after the push
            gate.touch()

            def all_done() -> bool:
                by_wf = read_events(env)
                return len(by_wf) == 5 and all(final_status(e) != "RUNNING" for e in by_wf.values())

            wait_until(all_done, 120, lambda: f"5 finished workflows, have {read_events(env)}")
        finally:
            worker.stop()
    by_wf = read_events(env)
    child1, child2 = _child_of(by_wf, p1), _child_of(by_wf, second.workflow_id)
    runtime = [by_wf[child1], by_wf[child2]]
    assert [_started(ev).definition["version"] for ev in runtime] == [1, 2]
    assert _started(runtime[0]).taskdefs == [TASKDEFS[1]]  # pin.v1 as it was at the start
    simulated = _simulated(2)
    assert (
        [_refs(ev) for ev in runtime]
        == [[t["taskReferenceName"] for t in child["tasks"]] for child in simulated]
        == [["v1_step"], ["v2_step", "v1_again"]]
    )
    assert [final_status(ev) for ev in runtime] == [child["status"] for child in simulated]
    assert_log_invariants(env, {p1, child1, probe, second.workflow_id, child2})
