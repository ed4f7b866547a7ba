"""The reconciler against the real broker (issue 12, item 4; ADR 15): a task whose ready record
was dead-lettered is queued again a bound after it was queued and completed by the worker that
sat idle meanwhile, and a requeue of a task the dispatcher already holds changes nothing (one
lease, one outcome).

Decider, timer service, dispatcher and ``--noop`` workers run as processes, with a 3 s bound.
The decider runs as ``faulty_role --corrupt ready:1``: its first ready record carries bytes no
one can decode, which the dispatcher dead-letters (the dead letter proves the fault fired).
"""

from __future__ import annotations

import pytest

from es_sched.domain.events import Event
from es_sched.kafka.dead_letters import header_map
from es_sched.serialization.records import decode_ready
from testkit.faulty_role import MODULE
from testkit.kafka import read_to_end
from testkit.net import free_port, metric, scrape
from testkit.runtime import (
    Env,
    Role,
    assert_log_invariants,
    final_status,
    read_events,
    roles,
)
from testkit.wait import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.fault]
BOUND_S = 3.0
LOST = {"name": "lost", "version": 1, "tasks": [{"name": "re.step", "taskReferenceName": "s"}]}
HELD = {"name": "held", "version": 1, "tasks": [{"name": "re.held", "taskReferenceName": "h"}]}


def _of(events: list[Event], kind: str) -> list[Event]:
    return [e for e in events if e.type == kind]


def _noop_worker(env: Env, task_type: str) -> Role:
    return Role(
        env, "worker", ["worker", "--noop", "--types", task_type, "--worker-id", f"w-{task_type}"]
    )


def _state(env: Env, *wfs: str) -> str:
    by_wf = read_events(env)
    return "; ".join(f"{wf}: {[e.type for e in by_wf.get(wf, [])]}" for wf in wfs)


def test_a_task_whose_ready_record_was_dead_lettered_is_requeued_and_completed() -> None:
    env = Env(extra={"ES_SCHED_RUN_REQUEUE_AFTER_S": str(BOUND_S)})
    env.create()
    env.push(LOST, [{"name": "re.step", "retryCount": 0}])
    env.push(HELD, [{"name": "re.held", "retryCount": 0}])
    port = free_port()
    decider = Role(
        env,
        "decider",
        ["--role", "decider", "--corrupt", "ready:1"],
        module=MODULE,
        ES_SCHED_RUN_METRICS_PORT=str(port),
    )
    workers: list[Role] = []
    try:
        decider.wait_log("started")
        with roles(env, "timers", "dispatcher"):
            workers.append(_noop_worker(env, "re.step"))
            workers[0].wait_log("started")
            [lost] = [s.workflow_id for s in env.submit("lost", [{}])]
            wait_until(lambda: bool(read_to_end(env.topics.dead_letters)), 60, "the dead letter")
            # No worker serves re.held yet: its task waits in the dispatcher's queue, requeued.
            [held] = [s.workflow_id for s in env.submit("held", [{}])]
            wait_until(
                lambda: (
                    final_status(read_events(env).get(lost, [])) == "COMPLETED"
                    and bool(_of(read_events(env).get(held, []), "task.requeued"))
                ),
                60,
                lambda: f"the lost task done and the held one requeued: {_state(env, lost, held)}",
            )
            workers.append(_noop_worker(env, "re.held"))
            wait_until(
                lambda: final_status(read_events(env).get(held, [])) == "COMPLETED",
                60,
                lambda: f"the held task done: {_state(env, held)}",
            )
        wait_until(
            lambda: (metric(scrape(port), "es_sched_decider_requeues_total") or 0) >= 2,
            10,
            "the decider's requeue counter",
        )
    finally:
        for role in (*workers, decider):
            role.stop()

    # The fault fired: the dispatcher dead-lettered the lost task's first ready record.
    [letter] = read_to_end(env.topics.dead_letters)
    headers = header_map(letter)
    assert (headers["origin.topic"], headers["error.role"]) == (env.topics.ready, "dispatcher")
    assert letter.key() == b"re.step"
    records = read_to_end(env.topics.ready)
    ready = [decode_ready(m.value()) for m in records if m.value() != letter.value()]
    by_wf = read_events(env)
    for wf in (lost, held):
        events = by_wf[wf]
        [scheduled] = _of(events, "task.scheduled")
        [first, *_] = _of(events, "task.requeued")
        waited = (first.occurred_at - scheduled.occurred_at).total_seconds()
        assert waited >= BOUND_S, f"{wf} requeued after {waited:.2f}s, before the bound"
        # one lease and one outcome, although the task was on the ready topic more than once
        [dispatched] = _of(events, "task.dispatched")
        assert dispatched.seq > first.seq
        assert len(_of(events, "task.completed")) == 1, wf
        assert not _of(events, "task.completion_rejected"), wf
        print(
            f"\nreconciler: {wf} requeued {waited:.2f}s after it was scheduled (bound "
            f"{BOUND_S:g}s), {len(_of(events, 'task.requeued'))} requeue(s)"
        )
    assert sum(r["workflow_id"] == held for r in ready) >= 2  # the duplicate the dispatcher held
    assert_log_invariants(env, {lost, held})
