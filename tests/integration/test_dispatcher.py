"""The dispatcher role against a real Kafka: priorities, FIFO, rate limits, GPU placement,
version bans, lease expiry and preemption, seen on the assignments and task-results topics."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from click.testing import CliRunner

from es_sched.cli.config import config
from es_sched.domain.commands import DispatchTask, ExpireLease
from es_sched.domain.learned import RunStats
from es_sched.kafka.stats import publisher
from es_sched.serialization import wire
from es_sched.serialization.records import decode_alert, encode_ready
from testkit.kafka import Reader
from testkit.net import free_port, scrape
from testkit.runtime import Env, Role
from testkit.settings import BOOTSTRAP, kafka_connection
from testkit.wait import wait_until
from tests.integration.dispatch_harness import FakeWorker, bench, task_results

pytestmark = pytest.mark.integration


def _count_is(w: FakeWorker, n: int) -> Callable[[], bool]:
    return lambda: len(w.assignments) == n


def test_priority_zero_jumps_500_queued_tasks_and_capacity_is_released() -> None:
    port = free_port()
    with bench(metrics_port=port) as b:
        for i in range(500):
            b.ready(f"p8-{i:03d}", priority=8)
        b.ready("urgent", priority=0)
        b.flush()
        wait_until(lambda: b.queued() == 501, 30, "501 queued tasks")
        wait_until(
            lambda: 'es_sched_queue_depth{priority="8",task_type="enc"} 500' in scrape(port),
            10,
            "the depth gauge",
        )
        with FakeWorker(b, "w1", cpu=1) as w:
            wait_until(lambda: len(w.assignments) == 1, 15, "the first assignment")
            assert w.ids() == ["urgent"]
            time.sleep(0.5)
            assert len(w.assignments) == 1  # capacity 1: nothing else until it ends
            b.completed("urgent")  # released by the task.completed event
            wait_until(lambda: len(w.assignments) == 2, 15, "the second assignment")
            for n in range(2, 5):  # released by heartbeats that no longer list the task
                w.finish(w.assignments[-1].task_id)
                wait_until(_count_is(w, n + 1), 15, f"assignment {n + 1}")
            assert w.ids() == ["urgent", "p8-000", "p8-001", "p8-002", "p8-003"]
        results = Reader(b.topics.task_results)
        wait_until(lambda: len(results.read()) >= 5, 15, "five DispatchTask inputs")
        first = task_results(results)[0][1]
        assert isinstance(first, DispatchTask) and first.task_id == "urgent"
        assert first.input_id == f"dispatch:urgent:1:{first.lease_token}"  # ADR 50
        assert first.worker_id == "w1" and first.lease_token == w.assignments[0].lease_token
        text = scrape(port)
        assert "es_sched_dispatched_total 5" in text
        assert "es_sched_dispatch_latency_seconds_count 5" in text
        results.close()


def test_fifo_within_a_level_and_older_workflows_first() -> None:
    now = datetime.now(UTC)
    with bench() as b:
        order_new, order_old = [], []
        for i in range(60):  # interleaved: a new workflow's tasks and an older one's
            if i % 3:
                b.ready(f"new-{i:02d}", workflow_id="wf-new", started=now)
                order_new.append(f"new-{i:02d}")
            else:
                b.ready(f"old-{i:02d}", workflow_id="wf-old", started=now - timedelta(hours=1))
                order_old.append(f"old-{i:02d}")
        b.flush()
        wait_until(lambda: b.queued() == 60, 30, "60 queued tasks")
        with FakeWorker(b, "big", cpu=1000) as w:
            wait_until(lambda: len(w.assignments) == 60, 15, "60 assignments")
        assert w.ids() == order_old + order_new


def test_a_type_rate_limit_holds_in_every_one_second_window() -> None:
    rate, n = 5, 21
    with bench(config={"rate:type:enc": {"rate": rate, "burst": 1}}) as b:
        with FakeWorker(b, "big", cpu=100) as w:
            for i in range(n):
                b.ready(f"t{i:02d}")
            b.flush()
            wait_until(lambda: len(w.assignments) == n, 30, f"{n} assignments")
        results = Reader(b.topics.task_results)
        wait_until(lambda: len(results.read()) == n, 15, f"{n} DispatchTask inputs")
        times = sorted(ms for ms, inp in task_results(results) if isinstance(inp, DispatchTask))
        results.close()
    assert len(times) == n
    worst = max(sum(1 for u in times if t <= u < t + 1000) for t in times)
    assert worst <= rate, f"{worst} dispatches within one second at {rate}/s"
    assert times[-1] - times[0] >= (n - 1) * 1000 / rate - 50
    assert b.dispatcher.m_limited.value(limit="type_rate") > 0


def test_gpu_memory_need_never_lands_on_a_worker_reporting_less_free() -> None:
    small = [wire.GpuStatus(0, 16384, 2048)]
    big = [wire.GpuStatus(0, 16384, 1024), wire.GpuStatus(1, 16384, 8192)]
    with bench() as b, FakeWorker(b, "a-small", cpu=8, gpus=small) as s:
        with FakeWorker(b, "b-big", cpu=8, gpus=big) as g:
            wait_until(lambda: len(b.dispatcher.core.fleet.workers) == 2, 10, "two workers")
            for i in range(4):
                b.ready(f"gpu-{i}", gpu_memory_mb=4096)
            b.flush()
            wait_until(lambda: len(g.assignments) == 2, 15, "two GPU assignments")
            time.sleep(1.0)
            assert len(g.assignments) == 2  # device 1 has room for two 4 GiB tasks only
            assert {a.gpu for a in g.assignments} == {1}
            g.finish("gpu-0")
            wait_until(lambda: len(g.assignments) == 3, 15, "a third after one ended")
        assert s.assignments == []


def test_a_banned_version_gets_nothing_until_unbanned() -> None:
    # binpack would pick the tighter v1 worker if it were not banned
    with (
        bench(config={"ban-version:v1": {}}) as b,
        FakeWorker(b, "a-v1", cpu=2, version="v1") as old,
        FakeWorker(b, "b-v2", cpu=100, version="v2") as new,
    ):
        wait_until(lambda: len(b.dispatcher.core.fleet.workers) == 2, 10, "two workers")
        for i in range(5):
            b.ready(f"t{i}")
        b.flush()
        wait_until(lambda: len(new.assignments) == 5, 15, "five assignments")
        assert old.assignments == []
        b.config("ban-version:v1", None)
        time.sleep(0.5)
        b.ready("after-unban")
        b.flush()
        wait_until(lambda: len(old.assignments) == 1, 15, "the unbanned worker's task")
        assert old.ids() == ["after-unban"]


def test_an_unheartbeated_lease_expires_and_the_task_moves_to_a_live_worker() -> None:
    """...and the silent worker, declared dead, is an alert (ADR 71): a record naming the task
    it lost and ``es_sched_worker_dead_total{pool}``."""
    with bench(heartbeat_s=0.5, lease_k=3, suspect_after_s=1.0, dead_after_s=2.0) as b:
        results = Reader(b.topics.task_results)
        with FakeWorker(b, "doomed") as doomed:
            b.ready("job", workflow_id="wf-job")
            b.flush()
            wait_until(lambda: len(doomed.assignments) == 1, 15, "the first assignment")
            doomed.silent.set()  # it stops heartbeating
            with FakeWorker(b, "healthy") as healthy:
                wait_until(lambda: len(healthy.assignments) == 1, 15, "the re-assignment")
                wait_until(lambda: len(doomed.cancels) == 1, 15, "a cancel to the silent worker")
        assert doomed.cancels[0].reason == "lease expired"
        again = healthy.assignments[0]
        assert (again.task_id, again.lease_epoch) == ("job", 2)
        assert again.lease_token != doomed.assignments[0].lease_token
        wait_until(lambda: len(results.read()) >= 3, 15, "dispatch, expire, dispatch")
        inputs = [inp for _, inp in task_results(results)]
        results.close()
        assert [type(i) for i in inputs[:3]] == [DispatchTask, ExpireLease, DispatchTask]
        assert inputs[1].input_id == "expire:job:1" and inputs[1].workflow_id == "wf-job"
        assert b.dispatcher.m_expired.value() == 1
        dead = b.dispatcher.m_worker_dead
        wait_until(lambda: dead.value(pool="default") == 1, 15, "the silent worker declared dead")
        alerts = Reader(b.topics.alerts)
        wait_until(lambda: len(alerts.read()) == 1, 15, "its worker.dead alert")
        alert = decode_alert(alerts.read()[0].value())
        alerts.close()
        assert (alert["kind"], alert["subject"], alert["reclaimed"]) == (
            "worker.dead",
            "doomed",
            ["job"],
        )


def test_preemption_of_a_long_running_low_priority_task() -> None:
    with bench(preempt_after_s=1.0) as b, FakeWorker(b, "w1", cpu=1) as w:
        results = Reader(b.topics.task_results)
        b.ready("slow", priority=7, workflow_id="wf-slow")
        b.flush()
        wait_until(lambda: len(w.assignments) == 1, 15, "the slow task's assignment")
        time.sleep(1.2)
        b.ready("urgent", priority=0, workflow_id="wf-urgent")
        b.flush()
        wait_until(lambda: len(w.assignments) == 2, 15, "the urgent task's assignment")
        assert w.cancels == [wire.Cancel("w1", "slow", 1, "preempted")]
        assert w.ids() == ["slow", "urgent"]
        b.completed("urgent", "wf-urgent")
        wait_until(lambda: len(w.assignments) == 3, 15, "the slow task back")
        assert (w.assignments[2].task_id, w.assignments[2].lease_epoch) == ("slow", 2)
        wait_until(lambda: len(results.read()) >= 4, 15, "four decider inputs")
        ids = [inp.input_id for _, inp in task_results(results)]
        results.close()
        again = next(i for i in ids if i.startswith("dispatch:slow:2:"))  # the token follows
        assert "expire:slow:1" in ids and ids.index("expire:slow:1") < ids.index(again)
        assert b.dispatcher.m_preempted.value() == 1


def test_role_starts_from_the_cli() -> None:
    env = Env()
    role = Role(env, "dispatcher")
    try:
        role.wait_log("dispatcher started")
    finally:
        role.stop()
    assert role.proc.returncode == 0


def test_config_cli_writes_records_that_show_folds(monkeypatch: pytest.MonkeyPatch) -> None:
    env = Env()
    for name, value in env.vars.items():
        monkeypatch.setenv(name, value)
    runner = CliRunner()
    for args in (
        ["set-rate", "--type", "enc", "5", "--burst", "2"],
        ["set-rate", "--tenant", "acme", "1"],
        ["set-concurrency", "enc", "3"],
        ["ban-version", "v1"],
        ["ban-version", "v2"],
        ["unban-version", "v2"],
        ["set-pool", "enc", "gpu"],
        ["set-policy", "gpu", "spread"],
    ):
        result = runner.invoke(config, args)
        assert result.exit_code == 0, result.output
    shown = runner.invoke(config, ["show", "--json"])
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.output) == {
        "rate:type:enc": {"rate": 5.0, "burst": 2.0},
        "rate:tenant:acme": {"rate": 1.0},
        "concurrency:enc": {"limit": 3},
        "ban-version:v1": {},
        "pool:enc": {"pool": "gpu"},
        "policy:gpu": {"policy": "spread"},
    }


def test_a_cost_estimate_is_placed_by_the_ratio_learned_for_its_size_class() -> None:
    """ADR 66. The stats record is published here as the analytics role would (``publisher``);
    the dispatcher's StatsView reads it from the stats topic. The estimate (1 cpu) fits the
    tighter worker, which binpack picks; the learned ratio (2x) makes it 2 cpus, the larger one."""
    inputs = {"model": "media-cost/1", "cpu_seconds": 60.0, "cpu_max": 2.0, "accel": "cpu"}
    inputs |= {"codec": "h264", "height": 720, "duration_s": 30.0}
    stats = RunStats(
        "enc",
        "h720-d60-h264",
        "2026-12-07T14:00:00Z",
        10,
        30.0,
        60.0,
        70.0,
        0.1,
        0.5,
        0,
        0.0,
        cost_ratio=2.0,
        memory_p95_mb=300.0,
    )
    with (
        bench() as b,
        FakeWorker(b, "a-small", cpu=1) as small,
        FakeWorker(b, "b-large", cpu=2) as large,
    ):
        publisher(kafka_connection(BOOTSTRAP), b.topics.stats)(stats)
        view = b.dispatcher.stats
        assert view is not None  # on by default
        wait_until(lambda: view.runtime("enc", "h720-d60-h264") is not None, 15, "the stats")
        wait_until(lambda: len(b.dispatcher.core.fleet.workers) == 2, 10, "two workers")
        value = encode_ready(
            workflow_id="wf",
            task_id="enc-720",
            ref="enc-720",
            name="enc",
            attempt=1,
            input={"height": 720, "codec": "h264"},
            priority=4,
            resources={"cpu": 1.0, "memory_mb": 512, "inputs": inputs},
            rate_limit_key=None,
            tenant=None,
            callback=False,
            workflow_started_at=None,
        )
        b.producer.produce(b.topics.ready, key=b"enc", value=value)
        b.flush()
        wait_until(_count_is(large, 1), 15, "the transcode on the larger worker")
        (a,) = large.assignments
        assert (a.resources["cpu"], a.resources["memory_mb"]) == (2.0, 384)
        assert a.resources["learned"]["estimate"] == {"cpu": 1.0, "memory_mb": 512}
        assert a.resources["learned"]["cost_ratio"] == 2.0
        assert small.assignments == []
        labels = {"task_type": "enc", "size_class": "h720-d60-h264"}
        assert b.dispatcher.m_cost_ratio.value(**labels) == 2.0
