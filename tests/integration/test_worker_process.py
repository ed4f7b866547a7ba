"""The worker as a process on a real broker: a graceful stop hands back what it did not finish
and leaves, a restarted worker resumes after its committed position, the CLI's no-op worker,
real GPUs in its heartbeat (skipped without a driver), and murmur2 keys landing where the
dispatcher computes them. The test plays the dispatcher (tests/integration/worker_harness.py);
the SDK's task contract is in test_worker_sdk.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from es_sched.domain import commands as c
from es_sched.kafka.clients import producer
from es_sched.kafka.partitioner import partition_for
from es_sched.serialization import wire
from es_sched.settings import Settings
from es_sched.workers import TaskContext, discover
from es_sched.workers.sdk import HANDED_BACK
from testkit.settings import BOOTSTRAP, kafka_connection, vars_of
from testkit.wait import wait_until
from tests.integration.worker_harness import (
    Dispatcher,
    Running,
    echoes_lease,
    make_worker,
    worker_settings,
)

pytestmark = pytest.mark.integration
JSON = dict[str, Any]


@pytest.fixture
def settings(unique: str) -> Settings:
    return worker_settings(unique)


def test_graceful_stop_hands_back_unfinished_tasks_and_leaves(
    settings: Settings, dispatcher: Dispatcher
) -> None:
    w = make_worker(settings, grace_s=0.5)
    running, saw_cancel = threading.Event(), threading.Event()

    @w.task("quick")
    def quick(ctx: TaskContext, task_input: JSON) -> JSON:
        return {"ok": True}

    @w.task("forever")
    def forever(ctx: TaskContext, task_input: JSON) -> JSON:
        running.set()
        if ctx.cancel_event.wait(30):
            saw_cancel.set()
        return {"should": "not be reported"}

    run = Running(w)
    with run:
        done = dispatcher.assign(w.worker_id, "quick", {})
        dispatcher.final(done.task_id)
        long = dispatcher.assign(w.worker_id, "forever", {})
        assert running.wait(15)
        started = time.monotonic()
    assert time.monotonic() - started < 10
    assert saw_cancel.wait(5)
    failed = dispatcher.final(long.task_id)
    assert isinstance(failed, c.ReportFailed)
    assert (failed.reason, failed.terminal) == (HANDED_BACK, False) and echoes_lease(failed, long)
    dispatcher.sentinel(long.workflow_id)  # the worker stopped: nothing of it comes after this
    assert dispatcher.types(long.task_id) == ["worker.task_started", "worker.task_failed"]
    wait_until(lambda: dispatcher.statuses(w.worker_id)[-1:] == [None], 10, "status tombstone")


def test_a_restarted_worker_resumes_after_its_committed_position(
    settings: Settings, dispatcher: Dispatcher
) -> None:
    w = make_worker(settings)
    w.task("echo")(lambda ctx, task_input: task_input)
    with Running(w):
        first = dispatcher.assign(w.worker_id, "echo", {"n": 1})
        dispatcher.final(first.task_id)
    second = dispatcher.assign(w.worker_id, "echo", {"n": 2})  # sent while it is down
    again = make_worker(settings, worker_id=w.worker_id)
    again.task("echo")(lambda ctx, task_input: task_input)
    with Running(again):
        assert isinstance(dispatcher.final(second.task_id), c.ReportCompleted)
    assert dispatcher.types(first.task_id).count("worker.task_completed") == 1


def test_murmur2_matches_where_the_producer_puts_keys(unique: str) -> None:
    topic, partitions = f"{unique}.murmur2", 7
    admin = AdminClient(kafka_connection(BOOTSTRAP).config())
    admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=-1)])[
        topic
    ].result(30)
    p = producer(kafka_connection(BOOTSTRAP))
    keys = [f"worker-{i}-{uuid.uuid4().hex[:6]}".encode() for i in range(60)] + [b"21", b"x"]
    landed: dict[bytes, int] = {}

    def delivered(err: object, msg: Any) -> None:
        assert err is None
        landed[msg.key()] = msg.partition()

    for key in keys:
        p.produce(topic, key=key, value=b"v", on_delivery=delivered)
    assert p.flush(30) == 0
    assert landed == {k: partition_for(k, partitions) for k in keys}
    assert len(set(landed.values())) == partitions


def test_cli_noop_worker_echoes_and_stops_on_sigterm(
    settings: Settings, dispatcher: Dispatcher
) -> None:
    worker_id = f"cli-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, **vars_of(settings)}
    cmd = [
        sys.executable,
        "-c",
        "from es_sched.cli.worker import worker; worker()",
        "--noop",
        "--types",
        "a,b",
        "--worker-id",
        worker_id,
        "--heartbeat-s",
        "0.2",
    ]
    proc = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            if f"worker {worker_id} started" in line:
                break
        a = dispatcher.assign(worker_id, "b", {"uri": "file:///x.mp4"})
        done = dispatcher.final(a.task_id)
        assert isinstance(done, c.ReportCompleted) and done.output == {"uri": "file:///x.mp4"}
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    wait_until(lambda: dispatcher.statuses(worker_id)[-1:] == [None], 10, "status tombstone")
    beat = next(s for s in dispatcher.statuses(worker_id) if isinstance(s, wire.WorkerStatus))
    assert beat.types == ["a", "b"]


def test_cli_noop_needs_types() -> None:
    from click.testing import CliRunner  # noqa: PLC0415

    from es_sched.cli.worker import worker  # noqa: PLC0415

    result = CliRunner().invoke(worker, ["--noop"])
    assert result.exit_code == 2 and "--types" in result.output


def test_real_gpus_are_reported_with_free_memory(
    settings: Settings, dispatcher: Dispatcher
) -> None:
    cap = discover()
    if not cap.gpus:
        pytest.skip("no NVIDIA driver: pynvml found no device")
    assert [g.index for g in cap.gpus] == list(range(len(cap.gpus)))
    assert all(0 < g.free_mb <= g.total_mb and g.name for g in cap.gpus)
    w = make_worker(settings, capacity=None)
    w.task("noop")(lambda ctx, task_input: {})
    with Running(w):
        wait_until(lambda: bool(dispatcher.statuses(w.worker_id)), 10, "a heartbeat")
    beat = dispatcher.statuses(w.worker_id)[0]
    assert isinstance(beat, wire.WorkerStatus) and len(beat.gpus) == len(cap.gpus)
    assert all(g.free_mb > 0 for g in beat.gpus)
