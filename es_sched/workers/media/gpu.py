"""Whether this worker can encode on an NVIDIA GPU (NVENC).

NVENC is usable when NVML (``es_sched.workers.capacity.nvml_gpus``) reports at least one device
AND ``ffmpeg -hide_banner -encoders`` lists ``h264_nvenc`` (Debian's ffmpeg is built with
it; the driver's libnvidia-encode is what is usually missing). ``detect`` answers once, with
the reason when not, when the media handlers are registered; a transcode then uses NVENC only
when the dispatcher pinned it to a device (``ctx.gpu``), i.e. the task declared GPU memory.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from es_sched.serialization.wire import GpuStatus
from es_sched.workers.capacity import nvml_gpus
from es_sched.workers.media.proc import run_quick


@dataclass(frozen=True)
class Nvenc:
    available: bool
    reason: str  # why not, or which devices and encoders
    encoders: frozenset[str] = frozenset()


def ffmpeg_encoders(ffmpeg: str) -> frozenset[str]:
    """Encoder names from ``ffmpeg -encoders`` (lines like `` V....D libx264  ...``)."""
    done = run_quick([ffmpeg, "-hide_banner", "-encoders"], timeout_s=30)
    names = set()
    for line in done.stdout.splitlines():
        fields = line.split()
        if len(fields) >= 2 and len(fields[0]) == 6 and fields[0][0] in "VAS":
            names.add(fields[1])
    return frozenset(names)


def detect(ffmpeg: str, gpus: Callable[[], list[GpuStatus]] = nvml_gpus) -> Nvenc:
    devices = gpus()
    if not devices:
        return Nvenc(False, "NVML reports no NVIDIA GPU on this machine")
    encoders = ffmpeg_encoders(ffmpeg) & {"h264_nvenc", "hevc_nvenc"}
    if "h264_nvenc" not in encoders:
        return Nvenc(False, f"{ffmpeg} lists no h264_nvenc encoder")
    names = ", ".join(f"{g.index}: {g.name}" for g in devices)
    return Nvenc(True, f"NVENC ({', '.join(sorted(encoders))}) on {names}", encoders)
