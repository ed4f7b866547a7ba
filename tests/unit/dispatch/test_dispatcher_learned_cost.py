"""The dispatcher role with learned cost (ADR 66), on fakes: a ready record carrying a cost
estimate is placed by its size class's learned figures, the worker's assignment carries them
beside the estimate, and the metrics say so."""

from __future__ import annotations

from es_sched.dispatch import records as dispatch_records
from es_sched.dispatch.core.placement import WorkerView
from es_sched.domain.learned import RunStats
from es_sched.domain.learned_cost import cores_for
from es_sched.serialization import wire
from es_sched.serialization.records import encode_ready
from es_sched.workers.media.cost import estimate_grid
from tests.unit.dispatch.fakes import T0, OnFakes, on_fakes

TRANSCODE = "media.transcode"


def transcode_ready(task_id: str) -> bytes:
    """A 720p H.264 transcode declaring the probe's estimate for a 30 s 1080p source."""
    resources = estimate_grid(30.0, 1920, 1080, 30.0, max_cpu=4.0)["estimates"]["h264_720"]
    return encode_ready(
        workflow_id=f"wf-{task_id}",
        task_id=task_id,
        ref="transcode_720p",
        name=TRANSCODE,
        attempt=1,
        input={"height": 720, "codec": "h264", "preset": "medium"},
        priority=4,
        resources={**resources, "gpu_memory_mb": 0, "custom": {}},
        rate_limit_key=None,
        tenant=None,
        callback=False,
        workflow_started_at=T0,
    )


def learned(ratio: float) -> RunStats:
    return RunStats(
        TRANSCODE,
        "h720-d60-h264",
        "2026-12-07T13:59:00Z",
        12,
        20.0,
        30.0,
        31.0,
        0.1,
        0.3,
        0,
        0.0,
        cost_ratio=ratio,
        memory_p95_mb=300.0,
    )


def with_transcoder() -> OnFakes:
    f = on_fakes()
    view = WorkerView("enc", "default", "1.0", frozenset({TRANSCODE}), 8, 16000, last_seen=T0)
    f.d.core.fleet.upsert(view)
    return f


def assignment_sent(values: list[tuple[str, bytes | None]]) -> wire.Assignment:
    (raw,) = [v for topic, v in values if topic.endswith(".assignments")]
    record = wire.decode(raw)
    assert isinstance(record, wire.Assignment)
    return record


def test_the_assignment_carries_the_learned_figures_beside_the_estimate() -> None:
    f = with_transcoder()
    known = {(TRANSCODE, "h720-d60-h264"): learned(3.0)}
    f.d.core.learned = lambda task_type, subject: known.get((task_type, subject))
    task = dispatch_records.ready_task(transcode_ready("t"), T0, T0)  # the ready schema admits it
    declared_cpu = task.resources["cpu"]
    f.d.journal.track(task, 2)
    f.d.core.enqueue(task)
    f.d.step(0)
    sent = assignment_sent(f.out.values)  # the wire schema admits it too
    inputs = task.resources["inputs"]
    assert sent.resources["learned"]["estimate"]["cpu"] == declared_cpu
    assert sent.resources["learned"]["cost_ratio"] == 3.0
    assert sent.resources["cpu"] > declared_cpu
    assert sent.resources["cpu"] == cores_for(3.0 * inputs["cpu_seconds"], inputs["cpu_max"])
    assert sent.resources["memory_mb"] == 384  # 300 MiB measured x 1.25, in 64 MiB steps
    assert sent.resources["inputs"] == inputs  # the raw estimate still rides along
    assert f.d.m_learned.value(task_type=TRANSCODE) == 1
    assert f.d.m_cost_ratio.value(task_type=TRANSCODE, size_class="h720-d60-h264") == 3.0


def test_with_the_setting_off_or_nothing_learned_the_estimate_is_sent_as_declared() -> None:
    f = with_transcoder()
    assert f.d.dispatch_settings.learned_cost  # on by default; run() then keeps a StatsView
    f.d.core.learned = lambda task_type, subject: None
    task = dispatch_records.ready_task(transcode_ready("t"), T0, T0)
    f.d.journal.track(task, 2)
    f.d.core.enqueue(task)
    f.d.step(0)
    sent = assignment_sent(f.out.values)
    assert sent.resources == task.resources
    assert f.d.m_learned.value(task_type=TRANSCODE) == 0
