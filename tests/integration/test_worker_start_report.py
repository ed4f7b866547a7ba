"""ADR 44 on a real broker: the SDK reports a task's start on its own only once the handler has
run ``started_after_s``; a shorter task's start travels with its outcome (``started: true``)
and the decider records ``task.started`` then the outcome from that one input.

- the SDK alone (the test plays the dispatcher): a quick task sends one report, a gated one
  sends its start while it runs (the test sees it before it opens the gate), then its outcome;
- decider, dispatcher and ``es-sched worker --noop`` processes: task-results holds no
  ``worker.task_started`` for the quick tasks, every task's history still has ``task.started``
  before ``task.completed``, and the audit's rules (I5 decides every recorded input again)
  pass on the log.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from es_sched.domain import commands as c
from es_sched.kafka.topics import ensure_topics, topics_for
from es_sched.serialization import decode_input
from es_sched.settings import Settings
from es_sched.workers import TaskContext
from testkit.kafka import read_to_end
from testkit.runtime import Env, Role, assert_log_invariants, read_events
from testkit.settings import BOOTSTRAP, kafka_connection, private_settings
from testkit.wait import wait_until
from tests.integration.test_limits import completed, running
from tests.integration.worker_harness import Dispatcher, Running, echoes_lease, make_worker

pytestmark = pytest.mark.integration
JSON = dict[str, Any]


@pytest.fixture
def settings(unique: str) -> Settings:
    s = private_settings(unique, 2, 2)
    ensure_topics(kafka_connection(BOOTSTRAP), topics_for(s))
    return s


def test_a_quick_task_sends_one_report_and_a_long_one_its_start_while_it_runs(
    settings: Settings, dispatcher: Dispatcher
) -> None:
    w = make_worker(settings, started_after_s=0.2)
    gate = threading.Event()

    @w.task("quick")
    def quick(ctx: TaskContext, task_input: JSON) -> JSON:
        return {"ok": True}

    @w.task("gated")
    def gated(ctx: TaskContext, task_input: JSON) -> JSON:
        if not gate.wait(30):
            raise TimeoutError("the test never opened the gate")
        return {"waited": True}

    with Running(w):
        q = dispatcher.assign(w.worker_id, "quick", {})
        g = dispatcher.assign(w.worker_id, "gated", {})
        done = dispatcher.final(q.task_id)
        # The gated handler is still running: its start must come on its own.
        wait_until(
            lambda: dispatcher.types(g.task_id) == ["worker.task_started"],
            15,
            "the gated task's start, reported while it runs",
        )
        gate.set()
        done_g = dispatcher.final(g.task_id)
    assert dispatcher.types(q.task_id) == ["worker.task_completed"]
    assert isinstance(done, c.ReportCompleted) and done.started and done.output == {"ok": True}
    assert dispatcher.types(g.task_id) == ["worker.task_started", "worker.task_completed"]
    assert isinstance(done_g, c.ReportCompleted) and done_g.started
    assert echoes_lease(done, q) and echoes_lease(done_g, g)


def _chain(name: str, task_type: str) -> JSON:
    tasks = [{"name": task_type, "taskReferenceName": f"s{i}"} for i in range(3)]
    return {"name": name, "version": 1, "tasks": tasks}


def test_through_the_decider_the_history_keeps_every_start_and_the_audit_passes() -> None:
    env = Env(partitions=2)
    env.create()
    task_type = f"quick_{env.prefix[-6:]}"
    env.push(_chain("start_with_outcome", task_type), [{"name": task_type, "retryCount": 0}])
    worker = ["worker", "--noop", "--types", task_type, "--concurrency", "4"]
    roles = [Role(env, "decider"), Role(env, "dispatcher"), Role(env, "worker", argv=worker)]
    with running(roles):
        with env.client() as client:
            ids = [s.workflow_id for s in client.submit_many("start_with_outcome", [{}] * 6)]
        wait_until(lambda: completed(env, ids), 180, "6 workflows of 3 quick tasks completed")
    reports = [
        decode_input(m.value() or b"")
        for m in read_to_end(env.topics.task_results, "read_committed", bootstrap=env.bootstrap)
    ]
    kinds = [type(r).__name__ for r in reports if isinstance(r, c.WorkerReport)]
    assert kinds.count("ReportCompleted") == 18, kinds  # the fact the test rests on: 18 ran
    # A no-op handler ends within the 0.5 s default, so no start went on its own.
    assert "ReportStarted" not in kinds, kinds
    assert all(r.started for r in reports if isinstance(r, c.ReportCompleted))
    for wf, events in read_events(env).items():
        if wf not in ids:
            continue
        steps = [
            (e.type, getattr(e.payload, "task_id", None))
            for e in events
            if e.type in ("task.started", "task.completed")
        ]
        tasks = {t for _, t in steps}
        assert len(tasks) == 3, steps
        for t in tasks:
            assert [k for k, tid in steps if tid == t] == ["task.started", "task.completed"]
    assert_log_invariants(env, set(ids))
