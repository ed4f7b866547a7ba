"""Capacity discovery without real hardware: meminfo text, cgroup quotas and a fake NVML."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pynvml
import pytest

from es_sched.serialization.wire import GpuStatus
from es_sched.workers.capacity import cpu_count, discover, memory_mb, nvml_gpus, parse_meminfo

MEMINFO = "MemTotal:       16314156 kB\nMemFree:         1234567 kB\nMemAvailable: 9 kB\n"
MIB = 1024 * 1024


def test_meminfo_total_in_mib() -> None:
    assert parse_meminfo(MEMINFO) == 16314156 // 1024
    assert parse_meminfo("MemFree: 1 kB\n") is None
    assert parse_meminfo("MemTotal: lots\n") is None


def test_memory_reads_the_file_and_falls_back_when_missing(tmp_path: Path) -> None:
    (tmp_path / "meminfo").write_text(MEMINFO)
    assert memory_mb(tmp_path / "meminfo") == 15931
    assert memory_mb(tmp_path / "absent") > 0  # sysconf's physical pages


def test_cpu_count_honours_a_cgroup_quota(tmp_path: Path) -> None:
    unlimited = cpu_count(tmp_path / "absent")
    assert unlimited >= 1
    (tmp_path / "cpu.max").write_text("50000 100000\n")
    assert cpu_count(tmp_path / "cpu.max") == min(unlimited, 0.5)
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert cpu_count(tmp_path / "cpu.max") == unlimited


def test_an_injected_probe_supplies_the_gpus() -> None:
    gpus = [GpuStatus(0, 24576, 20000, "L4"), GpuStatus(1, 24576, 24000, "L4")]
    cap = discover(gpu_probe=lambda: gpus)
    assert cap.gpus == gpus
    assert cap.cpu >= 1 and cap.memory_mb > 0


def test_no_driver_means_no_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_driver() -> None:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)

    monkeypatch.setattr(pynvml, "nvmlInit", no_driver)
    assert nvml_gpus() == []
    assert discover().gpus == []


def test_no_library_means_no_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_library() -> None:
        raise pynvml.NVMLError_LibraryNotFound(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)

    monkeypatch.setattr(pynvml, "nvmlInit", no_library)
    assert nvml_gpus() == []


def test_fake_nvml_devices_are_listed_in_mib(monkeypatch: pytest.MonkeyPatch) -> None:
    shut: list[bool] = []
    memory = {0: (16 * 1024 * MIB, 15 * 1024 * MIB), 1: (8 * 1024 * MIB, 1024 * MIB)}
    monkeypatch.setattr(pynvml, "nvmlInit", lambda: None)
    monkeypatch.setattr(pynvml, "nvmlShutdown", lambda: shut.append(True))
    monkeypatch.setattr(pynvml, "nvmlDeviceGetCount", lambda: 2)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetHandleByIndex", lambda i: i)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetName", lambda h: b"Tesla T4" if h else "A10")
    monkeypatch.setattr(
        pynvml,
        "nvmlDeviceGetMemoryInfo",
        lambda h: SimpleNamespace(total=memory[h][0], free=memory[h][1]),
    )
    assert nvml_gpus() == [GpuStatus(0, 16384, 15360, "A10"), GpuStatus(1, 8192, 1024, "Tesla T4")]
    assert shut == [True]


def test_a_driver_error_mid_listing_is_translated(monkeypatch: pytest.MonkeyPatch) -> None:
    def lost(_index: int) -> None:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)

    shut: list[bool] = []
    monkeypatch.setattr(pynvml, "nvmlInit", lambda: None)
    monkeypatch.setattr(pynvml, "nvmlShutdown", lambda: shut.append(True))
    monkeypatch.setattr(pynvml, "nvmlDeviceGetCount", lambda: 1)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetHandleByIndex", lost)
    assert nvml_gpus() == []
    assert shut == [True]
