"""What this machine offers a worker: CPUs, memory and NVIDIA GPUs, plus the custom units
its operator declares (``gpu_slot=2``, seconds of video in flight: nothing to discover).

``discover()`` reads the CPUs this process may run on (affinity, capped by a cgroup v2 quota),
``MemTotal`` from ``/proc/meminfo`` and, where an NVIDIA driver is present, every GPU through
NVML (``pynvml`` from nvidia-ml-py) with its total and free memory. A machine without the
driver or the library simply has no GPUs: NVML errors are translated here and never escape.
GPU indexes are NVML's, which follow PCI bus order; ``TaskContext.env`` sets
``CUDA_DEVICE_ORDER=PCI_BUS_ID`` so ``CUDA_VISIBLE_DEVICES`` means the same device.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from es_sched.serialization.wire import GpuStatus

log = logging.getLogger(__name__)
MIB = 1024 * 1024
GpuProbe = Callable[[], list[GpuStatus]]


@dataclass(frozen=True)
class Capacity:
    cpu: float
    memory_mb: int
    gpus: list[GpuStatus] = field(default_factory=list)
    custom: dict[str, float] = field(default_factory=dict)  # declared units (--custom K=N)


def parse_meminfo(text: str) -> int | None:
    """MemTotal in MiB from the text of /proc/meminfo (None when the line is missing)."""
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        if name.strip() == "MemTotal":
            fields = rest.split()
            if not fields or not fields[0].isdigit():
                return None
            unit = fields[1].lower() if len(fields) > 1 else "kb"
            factor = {"kb": 1024, "mb": MIB, "gb": 1024 * MIB}.get(unit, 1)
            return int(fields[0]) * factor // MIB
    return None


def memory_mb(meminfo: Path = Path("/proc/meminfo")) -> int:
    try:
        parsed = parse_meminfo(meminfo.read_text())
    except OSError:
        parsed = None
    if parsed is not None:
        return parsed
    try:  # not Linux, or /proc hidden: the physical pages the OS reports
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // MIB
    except (ValueError, OSError, AttributeError):
        return 0


def cpu_count(cgroup_cpu_max: Path = Path("/sys/fs/cgroup/cpu.max")) -> float:
    """CPUs this process may use: its affinity set, capped by a cgroup v2 CPU quota."""
    try:
        cpus = float(len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        cpus = float(os.cpu_count() or 1)
    try:
        quota, _, period = cgroup_cpu_max.read_text().strip().partition(" ")
        if quota != "max" and quota.isdigit() and period.isdigit() and int(period) > 0:
            cpus = min(cpus, int(quota) / int(period))
    except OSError:
        pass
    return cpus


def nvml_gpus() -> list[GpuStatus]:
    """Every NVIDIA GPU with total/free memory in MiB; [] without a driver or pynvml."""
    try:
        import pynvml  # noqa: PLC0415  (optional at run time: absent or driverless is normal)
    except ImportError:
        return []
    try:
        pynvml.nvmlInit()
    except (pynvml.NVMLError, OSError) as exc:
        log.debug("no NVIDIA driver: %s", exc)
        return []
    try:
        gpus = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            mem = pynvml.nvmlDeviceGetMemoryInfo(handle)
            name = pynvml.nvmlDeviceGetName(handle)
            if isinstance(name, bytes):  # older nvidia-ml-py returned bytes
                name = name.decode(errors="replace")
            gpus.append(GpuStatus(index, int(mem.total) // MIB, int(mem.free) // MIB, str(name)))
        return gpus
    except (pynvml.NVMLError, OSError) as exc:
        log.warning("NVML failed while listing GPUs, reporting none: %s", exc)
        return []
    finally:
        try:
            pynvml.nvmlShutdown()
        except (pynvml.NVMLError, OSError) as exc:
            log.debug("nvmlShutdown: %s", exc)


def discover(gpu_probe: GpuProbe | None = None) -> Capacity:
    """This machine's capacity; ``gpu_probe`` replaces NVML (tests, other vendors)."""
    return Capacity(cpu=cpu_count(), memory_mb=memory_mb(), gpus=(gpu_probe or nvml_gpus)())
