"""The worker's own admission: what held tasks use, and whether one more fits."""

from __future__ import annotations

from typing import Any

from es_sched.dispatch.core.placement import Need
from es_sched.serialization import wire
from es_sched.workers.admission import admits, use_of
from es_sched.workers.capacity import Capacity


def a(task_id: str, gpu: int | None = None, **resources: Any) -> wire.Assignment:
    return wire.Assignment(
        "w", "wf", task_id, "enc", 1, 1, "tok", "2030-01-01T00:00:00+00:00", {},
        gpu=gpu, resources=resources,
    )  # fmt: skip


CAP = Capacity(cpu=4, memory_mb=8000, gpus=[wire.GpuStatus(0, 8000, 8000)])


def test_cpu_memory_and_gpu_memory_on_the_pinned_device_bound_admission() -> None:
    running = [a("r1", cpu=2, memory_mb=4000), a("r2", gpu=0, cpu=1, gpu_memory_mb=6000)]
    assert admits(CAP, running, a("x", cpu=1, memory_mb=4000))
    assert not admits(CAP, running, a("x", cpu=1.5))
    assert not admits(CAP, running, a("x", memory_mb=4001))
    assert not admits(CAP, running, a("x", gpu=0, gpu_memory_mb=2001))
    assert admits(CAP, running, a("x", gpu=0, gpu_memory_mb=2000))


def test_an_idle_worker_starts_even_a_task_larger_than_itself() -> None:
    assert admits(CAP, [], a("huge", cpu=64))


def test_the_reported_use_reads_back_as_the_dispatchers_need() -> None:
    held = [a("r1", cpu=0.5, memory_mb=256, custom={"lic": 1}), a("r2", gpu=0, gpu_memory_mb=10)]
    report = use_of(held).report()
    assert report == {"cpu": 0.5, "memory_mb": 256, "gpu_memory_mb": 10, "custom": {"lic": 1.0}}
    assert Need.of(report) == Need(0.5, 256, 10, (("lic", 1.0),))
