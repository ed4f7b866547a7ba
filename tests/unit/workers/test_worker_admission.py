"""The worker's own admission: what held tasks use, and whether one more fits."""

from __future__ import annotations

from typing import Any

from click.testing import CliRunner

from es_sched.cli.worker import _capacity, worker
from es_sched.dispatch.core.placement import Need
from es_sched.serialization import wire
from es_sched.workers.admission import admits, use_of
from es_sched.workers.capacity import Capacity


def a(task_id: str, gpu: int | None = None, **resources: Any) -> wire.Assignment:
    return wire.Assignment(
        "w",
        "wf",
        task_id,
        "enc",
        1,
        1,
        "tok",
        "2030-01-01T00:00:00+00:00",
        {},
        gpu=gpu,
        resources=resources,
    )


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


def test_custom_units_bound_admission_as_the_worker_declared_them() -> None:
    cap = Capacity(cpu=4, memory_mb=8000, custom={"gpu_slot": 2})
    running = [a("r1", custom={"gpu_slot": 1}), a("r2", custom={"gpu_slot": 1})]
    assert not admits(cap, running, a("x", custom={"gpu_slot": 1}))
    assert admits(cap, running[:1], a("x", custom={"gpu_slot": 1}))
    assert not admits(cap, running[:1], a("x", custom={"licence": 1}))  # never declared
    assert admits(cap, running, a("x", cpu=1))  # asks for none


def test_the_cli_declares_custom_units_and_refuses_malformed_ones() -> None:
    capacity = _capacity(None, None, {"gpu_slot": 2.0})
    assert capacity is not None and capacity.custom == {"gpu_slot": 2.0}
    for bad in ("gpu_slot", "gpu_slot=-1", "=2", "gpu_slot=lots"):
        result = CliRunner().invoke(worker, ["--noop", "--types", "t", "--custom", bad])
        assert result.exit_code == 2 and "NAME=AMOUNT" in result.output, bad
