"""Restart and rerun on the live stack (ADR 27), driven as an operator drives them.

A workflow whose second task fails terminally ends FAILED; ``es-sched rerun ID --from-task b
--wait`` runs that task again as a new instance and the workflow completes. A workflow held
by a WAIT task is terminated; a restart of it while it is still running is refused (exit 1,
the reason), ``es-sched restart ID --wait`` after the terminate runs it again from its WAIT,
which a signal completes. The events carry who acted (``cli:<OS user>``), as the log and
PostgreSQL's event archive keep them; the test ends on the invariants, read models included.
"""

from __future__ import annotations

import getpass
import threading
from typing import Any

import pytest
from sqlalchemy import select

from es_sched.projections.postgres.models import EVENTS
from es_sched.projections.postgres.store import engine_for
from testkit.cli import es_sched
from testkit.runtime import (
    Env,
    Worker,
    assert_log_invariants,
    final_status,
    read_events,
    read_models_caught_up,
    roles,
)
from testkit.wait import wait_until

pytestmark = pytest.mark.integration

TWO_STEPS = {
    "name": "rerun_two_steps",
    "version": 1,
    "tasks": [
        {"name": "rerun.a", "taskReferenceName": "a", "type": "SIMPLE"},
        {
            "name": "rerun.b",
            "taskReferenceName": "b",
            "type": "SIMPLE",
            "inputParameters": {"from_a": "${a.output.ok}"},
        },
    ],
}
TASKDEFS = [{"name": n, "retryCount": 0} for n in ("rerun.a", "rerun.b")]
HOLD = {
    "name": "rerun_hold",
    "version": 1,
    "tasks": [{"name": "hold", "taskReferenceName": "hold", "type": "WAIT"}],
}


def status_of(env: Env, workflow_id: str) -> str:
    return final_status(read_events(env).get(workflow_id, []))


def test_fail_rerun_complete_and_terminate_restart_complete() -> None:
    env = Env()
    env.create()
    env.push(TWO_STEPS, TASKDEFS)
    env.push(HOLD, [])
    failing = threading.Event()
    failing.set()

    def policy(task: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        if task["ref"] == "b" and failing.is_set():
            return "FAILED", {}
        return "COMPLETED", {"ok": task["ref"]}

    me = f"cli:{getpass.getuser()}"
    with (
        roles(env, "decider", "projector-pg", "projector-search"),
        Worker(env, policy) as worker,
    ):
        (failed,) = env.submit("rerun_two_steps", [{"asset": "ep1"}])
        (held,) = env.submit("rerun_hold", [{"asset": "ep2"}])
        wf, hold = failed.workflow_id, held.workflow_id
        wait_until(lambda: status_of(env, wf) == "FAILED", 120, "the workflow failed")

        # a restart while it runs is refused, as an event with the reason: exit 1
        early = es_sched("restart", hold, "--wait", "60", env=env.vars)
        assert early.returncode == 1 and "terminal state" in early.stderr, early.stderr
        env.cli("terminate", hold, "--wait", "60")

        failing.clear()
        rerun = env.cli("rerun", wf, "--from-task", "b", "--wait", "60")
        assert "accepted" in rerun and "workflow.rerun_started" in rerun, rerun
        wait_until(lambda: status_of(env, wf) == "COMPLETED", 120, "the rerun completed")

        restart = env.cli("restart", hold, "--wait", "60")
        assert "workflow.restarted" in restart, restart
        env.cli("signal", hold, "--wait", "60")
        wait_until(lambda: status_of(env, hold) == "COMPLETED", 120, "the restart completed")

        events = read_events(env)
        b_runs = [t for t in worker.executions if t[2] in ("COMPLETED", "FAILED")]
        assert len(b_runs) >= 3  # a, b failed, then b again as a new instance
        reruns = [e for e in events[wf] if e.type == "workflow.rerun_started"]
        assert len(reruns) == 1 and reruns[0].actor == me
        rejected = [e for e in events[hold] if e.type == "command.rejected"]
        assert len(rejected) == 1 and rejected[0].actor == me
        assert {e.actor for e in events[hold] if e.causation_id == rejected[0].causation_id} == {me}
        restarted = [e for e in events[hold] if e.type == "workflow.restarted"]
        assert len(restarted) == 1 and restarted[0].actor == me
        assert all(e.actor is None for e in events[wf] if e.type == "task.completed")

        assert_log_invariants(env, {wf, hold}, read_models=True)
        wait_until(lambda: read_models_caught_up(env), 120, "read models caught up")
        engine = engine_for(env.settings)
        try:
            with engine.connect() as conn:
                archived = conn.execute(
                    select(EVENTS.c.type, EVENTS.c.actor).where(
                        EVENTS.c.type.in_(["workflow.rerun_started", "workflow.restarted"])
                    )
                ).all()
        finally:
            engine.dispose()
        assert sorted(archived) == [("workflow.rerun_started", me), ("workflow.restarted", me)]
