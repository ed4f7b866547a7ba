"""The worker SDK on a real broker: the test plays the dispatcher, producing assignments and
cancels keyed by the worker id, and reads task-results and worker-status back. The worker as a
process (graceful stop, restart, the CLI, GPUs, where keys land) is in test_worker_process.

Cancellation contract checked here: a cancelled task reports nothing but
``worker.task_cancelled`` once its handler ended (the dispatcher took the lease back when it
sent the cancel, ADR 5; the decider only records it); a task still running when a graceful
shutdown's grace ends is handed back with a non-terminal ``worker.task_failed``. What a worker
never starts, and cancellation of async handlers and ffmpeg, are in test_worker_cancel.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from typing import Any

import pytest

from es_sched.domain import commands as c
from es_sched.kafka.partitioner import partition_for
from es_sched.serialization import wire
from es_sched.settings import Settings
from es_sched.workers import Capacity, TaskCancelled, TaskContext, TaskFailure
from testkit.peak import Peak
from testkit.wait import wait_until
from tests.integration.worker_harness import (
    Dispatcher,
    Running,
    echoes_lease,
    make_worker,
    worker_settings,
)

pytestmark = pytest.mark.integration
PARTITIONS = 4
JSON = dict[str, Any]


@pytest.fixture
def settings(unique: str) -> Settings:
    return worker_settings(unique, PARTITIONS)


def test_sync_and_async_handlers_report_started_then_completed(
    settings: Settings, dispatcher: Dispatcher
) -> None:
    w = make_worker(settings)

    @w.task("upper")
    def upper(ctx: TaskContext, task_input: JSON) -> JSON:
        return {"text": task_input["text"].upper(), "thread": threading.current_thread().name}

    @w.task("sum", resources={"cpu": 1})
    async def add(ctx: TaskContext, task_input: JSON) -> JSON:
        await asyncio.sleep(0.01)
        return {"sum": sum(task_input["xs"])}

    with Running(w):
        a = dispatcher.assign(w.worker_id, "upper", {"text": "abc"})
        b = dispatcher.assign(w.worker_id, "sum", {"xs": [1, 2, 3]})
        done_a, done_b = dispatcher.final(a.task_id), dispatcher.final(b.task_id)
    assert dispatcher.types(a.task_id) == ["worker.task_started", "worker.task_completed"]
    assert dispatcher.types(b.task_id) == ["worker.task_started", "worker.task_completed"]
    assert isinstance(done_a, c.ReportCompleted) and isinstance(done_b, c.ReportCompleted)
    assert done_a.output["text"] == "ABC" and done_a.output["thread"].startswith("es-sched-task")
    assert done_b.output == {"sum": 6}
    for report in dispatcher.reports(a.task_id) + dispatcher.reports(b.task_id):
        assert echoes_lease(report, a if report.task_id == a.task_id else b)


def test_failures_say_whether_they_are_retryable(
    settings: Settings, dispatcher: Dispatcher
) -> None:
    w = make_worker(settings)

    @w.task("bad_input")
    def bad_input(ctx: TaskContext, task_input: JSON) -> JSON:
        raise TaskFailure("unsupported codec", retryable=False, output={"codec": "vp6"})

    @w.task("flaky")
    def flaky(ctx: TaskContext, task_input: JSON) -> JSON:
        raise ConnectionError("storage unreachable")

    with Running(w):
        terminal = dispatcher.assign(w.worker_id, "bad_input", {})
        retry = dispatcher.assign(w.worker_id, "flaky", {})
        unknown = dispatcher.assign(w.worker_id, "nobody_serves_this", {})
        t, r, u = (dispatcher.final(x.task_id) for x in (terminal, retry, unknown))
    assert isinstance(t, c.ReportFailed) and t.terminal and t.reason == "unsupported codec"
    assert t.output == {"codec": "vp6"} and echoes_lease(t, terminal)
    assert isinstance(r, c.ReportFailed) and not r.terminal
    assert r.reason == "ConnectionError: storage unreachable"
    assert isinstance(u, c.ReportFailed) and not u.terminal and "no handler" in u.reason
    assert dispatcher.types(unknown.task_id) == ["worker.task_failed"]  # never started


def test_progress_goes_to_worker_status_and_the_workflow(
    settings: Settings, dispatcher: Dispatcher
) -> None:
    w = make_worker(settings)

    @w.task("encode")
    def encode(ctx: TaskContext, task_input: JSON) -> JSON:
        ctx.progress(50, "half way")
        ctx.progress(150)  # clamped
        return {}

    with Running(w):
        a = dispatcher.assign(w.worker_id, "encode", {})
        dispatcher.final(a.task_id)
        key = f"{w.worker_id}/{a.task_id}"
        wait_until(lambda: None in dispatcher.statuses(key), 10, "progress tombstone")
    records = dispatcher.statuses(key)
    first = records[0]
    assert isinstance(first, wire.Progress)
    assert (first.task_id, first.lease_epoch, first.percent, first.message) == (
        a.task_id,
        a.lease_epoch,
        50.0,
        "half way",
    )
    progress = [r for r in dispatcher.reports(a.task_id) if isinstance(r, c.ReportProgress)]
    assert [(p.percent, p.message) for p in progress] == [(50.0, "half way"), (100.0, "")]
    assert all(echoes_lease(p, a) for p in progress)
    assert len({p.input_id for p in progress}) == 2
    assert records[-1] is None  # forgotten once the task ended


def test_cancel_reaches_the_handler_and_only_the_cancel_is_reported(
    settings: Settings, dispatcher: Dispatcher
) -> None:
    w = make_worker(settings)
    running, ended = threading.Event(), threading.Event()

    @w.task("long")
    def long(ctx: TaskContext, task_input: JSON) -> JSON:
        running.set()
        try:
            while True:
                ctx.raise_if_cancelled()
                time.sleep(0.02)
        except TaskCancelled:
            ended.set()
            raise

    with Running(w):
        a = dispatcher.assign(w.worker_id, "long", {})
        assert running.wait(15)
        dispatcher.cancel(a)
        assert ended.wait(15), "the handler never saw the cancel"
        wait_until(lambda: w.running == [], 5, "task released")
        b = dispatcher.assign(w.worker_id, "long", {})  # the slot is free again
        assert running.wait(15)
        dispatcher.cancel(b)
        # the cancel report is the last thing the worker says about a task
        dispatcher.final(a.task_id)
        dispatcher.final(b.task_id)
    assert dispatcher.types(a.task_id) == ["worker.task_started", "worker.task_cancelled"]
    cancelled = dispatcher.reports(a.task_id)[-1]
    assert isinstance(cancelled, c.ReportCancelled) and cancelled.reason == "canceled"
    assert echoes_lease(cancelled, a)


def test_concurrency_bound_is_never_exceeded(settings: Settings, dispatcher: Dispatcher) -> None:
    w = make_worker(settings, concurrency=2)
    peak = Peak()

    @w.task("sleep")
    def sleep(ctx: TaskContext, task_input: JSON) -> JSON:
        with peak.held():
            time.sleep(0.3)
        return {}

    @w.task("asleep")
    async def asleep(ctx: TaskContext, task_input: JSON) -> JSON:
        with peak.held():
            await asyncio.sleep(0.3)
        return {}

    with Running(w):
        tasks = [dispatcher.assign(w.worker_id, ("sleep", "asleep")[i % 2], {}) for i in range(7)]
        for t in tasks:
            assert isinstance(dispatcher.final(t.task_id, 30), c.ReportCompleted)
    assert peak.max == 2


def test_tasks_over_the_workers_free_capacity_wait_and_are_reported_as_held(
    settings: Settings, dispatcher: Dispatcher
) -> None:
    """Two dispatchers can each place a 1-cpu task on the last free cpu (each sees the other's
    placement only in the next status report): the worker starts only what fits (ADR 6)."""
    w = make_worker(settings, concurrency=8, capacity=Capacity(cpu=2.0, memory_mb=4096))
    peak, release = Peak(), threading.Event()

    @w.task("enc")
    def enc(ctx: TaskContext, task_input: JSON) -> JSON:
        with peak.held(task_input["cpu"]):
            release.wait(10)
        return {}

    with Running(w):
        tasks = [
            dispatcher.assign(w.worker_id, "enc", {"cpu": 1.0}, resources={"cpu": 1.0})
            for _ in range(3)
        ]
        first_two = [t.task_id for t in tasks[:2]]
        wait_until(
            lambda: all("worker.task_started" in dispatcher.types(t) for t in first_two),
            10,
            "two tasks started",
        )

        def held_all() -> bool:
            last = [s for s in dispatcher.statuses(w.worker_id) if isinstance(s, wire.WorkerStatus)]
            return bool(last) and len(last[-1].running) == 3

        wait_until(held_all, 10, "a status holding all three")
        time.sleep(0.5)  # several heartbeats: the third must still wait
        assert dispatcher.types(tasks[2].task_id) == []
        status = [s for s in dispatcher.statuses(w.worker_id) if isinstance(s, wire.WorkerStatus)]
        assert status[-1].used["cpu"] == 3.0  # the dispatchers see all three as used
        release.set()
        for t in tasks:
            assert isinstance(dispatcher.final(t.task_id, 30), c.ReportCompleted)
    assert peak.max == 2.0


def test_status_heartbeats_carry_types_and_running_tasks(
    settings: Settings, dispatcher: Dispatcher
) -> None:
    w = make_worker(settings, concurrency=3, version="1.2.3", labels={"zone": "a"})
    release = threading.Event()

    @w.task("b_type")
    def slow(ctx: TaskContext, task_input: JSON) -> JSON:
        release.wait(10)
        return {}

    w.task("a_type")(slow)
    with Running(w):
        a = dispatcher.assign(w.worker_id, "b_type", {})

        def heartbeats_with_task() -> int:
            records = dispatcher.statuses(w.worker_id)
            return sum(isinstance(s, wire.WorkerStatus) and a.task_id in s.running for s in records)

        wait_until(lambda: heartbeats_with_task() >= 3, 10, "heartbeats while running")
        release.set()
        dispatcher.final(a.task_id)
    beats = [s for s in dispatcher.statuses(w.worker_id) if isinstance(s, wire.WorkerStatus)]
    busy = next(s for s in beats if s.running)
    assert busy.types == ["a_type", "b_type"] and busy.running == [a.task_id]
    assert (busy.pool, busy.version, busy.labels, busy.concurrency) == (
        "default",
        "1.2.3",
        {"zone": "a"},
        3,
    )
    assert (busy.cpu, busy.memory_mb) == (2.0, 4096) and busy.sent_at
    assert beats[0].running == []


def test_assignments_for_another_worker_on_the_partition_are_ignored(
    settings: Settings, dispatcher: Dispatcher
) -> None:
    w = make_worker(settings)
    mine = partition_for(w.worker_id.encode(), PARTITIONS)
    other = next(
        f"other-{i}"
        for i in range(1000)
        if partition_for(f"other-{i}".encode(), PARTITIONS) == mine
    )
    w.task("echo")(lambda ctx, task_input: task_input)
    with Running(w):
        theirs = dispatcher.assign(other, "echo", {"n": 1})
        ours = dispatcher.assign(w.worker_id, "echo", {"n": 2})
        assert isinstance(dispatcher.final(ours.task_id), c.ReportCompleted)
        time.sleep(0.3)
    assert dispatcher.types(theirs.task_id) == []


def test_an_assigned_gpu_is_pinned_for_subprocesses(
    settings: Settings, dispatcher: Dispatcher
) -> None:
    w = make_worker(settings)

    @w.task("probe")
    def probe(ctx: TaskContext, task_input: JSON) -> JSON:
        child = subprocess.run(
            [sys.executable, "-c", "import os; print(os.environ['CUDA_VISIBLE_DEVICES'])"],
            env=ctx.env,
            capture_output=True,
            text=True,
            check=False,
        )
        return {
            "gpu": ctx.gpu,
            "env": ctx.env.get("CUDA_VISIBLE_DEVICES"),
            "child": child.stdout.strip(),
        }

    with Running(w):
        pinned = dispatcher.assign(w.worker_id, "probe", {}, gpu=1)
        result = dispatcher.final(pinned.task_id)
    assert isinstance(result, c.ReportCompleted)
    assert result.output == {"gpu": 1, "env": "1", "child": "1"}
