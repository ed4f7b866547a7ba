"""Cost estimates for transcodes: duration x pixels x codec cost -> the resources to declare.

The work of one rendition is its output pixels (``width x height x fps x duration``) times a
codec cost (H.265 costs about four times H.264) times a preset factor, in cpu-seconds at the
calibration ``CPU_SECONDS_PER_GIGAPIXEL`` (libx264 ``medium`` on one core). From that:

- ``cpu``: enough cores to finish in about a minute, at least 0.5, at most what the
  encoder can use at that size and ``max_cpu`` (a worker never offers more): the
  ``domain.learned_cost.cores_for`` rule, which the dispatcher applies again to the estimate
  corrected by what the size class measured (ADR 66);
- ``memory_mb``: a base plus frame buffers and look-ahead per megapixel;
- on the GPU path (NVENC) little cpu and memory, and ``gpu_memory_mb`` for the encoder session.

Every estimate returns its ``inputs`` (and the ``MODEL`` version) so that recorded estimates
can be compared with measured run times and the constants refined. ``estimate_grid`` is what
``media.probe`` returns: resources per ``<codec>_<height>[_gpu]`` for the standard heights, so
a workflow's transcode tasks can declare ``"resources": "${probe.output.estimates.h264_720}"``
and the dispatcher places each by its own estimate. Each entry carries the estimate's
``inputs`` (``declared_inputs``: the model, its cpu-seconds and cap, the source's duration),
which is how the dispatcher recognises an estimate it may correct and how every role computes
the task's size class (``domain.learned.size_class``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

from es_sched.domain.learned_cost import ESTIMATE_KEY, cores_for, step_up

MODEL = "media-cost/1"
CPU_SECONDS_PER_GIGAPIXEL = 30.0
GPU_CPU_SECONDS_PER_GIGAPIXEL = 3.0  # decode and scale stay on the cpu
DEFAULT_FPS = 30.0
CODEC_COST = {"h264": 1.0, "h265": 4.0}
CODEC_MEMORY = {"h264": 1.0, "h265": 2.5}
PRESET_FACTOR = {
    "ultrafast": 0.2,
    "superfast": 0.3,
    "veryfast": 0.45,
    "faster": 0.65,
    "fast": 0.8,
    "medium": 1.0,
    "slow": 1.7,
    "slower": 3.0,
    "veryslow": 6.0,
    "placebo": 15.0,
}
STANDARD_HEIGHTS = (2160, 1440, 1080, 720, 480, 360)
Accel = Literal["cpu", "gpu"]


def scaled_width(src_width: int, src_height: int, height: int) -> int:
    """The even width that keeps the aspect ratio at ``height`` (what ``scale=-2:h`` gives)."""
    if src_width <= 0 or src_height <= 0:
        src_width, src_height = 16, 9
    # ffmpeg: av_rescale(h, w_in, h_in * 2) * 2, rounding halves away from zero
    return max(2, (src_width * height + src_height) // (2 * src_height) * 2)


def _threads_useful(pixels: int) -> float:
    """Past this many cores an encoder at this frame size gains little."""
    megapixels = pixels / 1e6
    return 2.0 if megapixels < 0.5 else 4.0 if megapixels < 1.5 else 8.0


@dataclass(frozen=True)
class Estimate:
    resources: dict[str, Any]
    cpu_seconds: float
    expected_s: float
    inputs: dict[str, Any]
    cpu_max: float  # the most cores this rendition was allowed (the encoder's use, max_cpu)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def declared_inputs(self) -> dict[str, Any]:
        """What the declared resources carry of this estimate (``ESTIMATE_KEY``): enough to
        correct it (``learned_cost.correct``) and to class it (``learned.size_class``; the
        height and codec come from the task's input). Kept short: the probe's grid repeats it
        in each of its entries."""
        return {
            "model": MODEL,
            "cpu_seconds": self.cpu_seconds,
            "cpu_max": self.cpu_max,
            "accel": self.inputs["accel"],
            "duration_s": self.inputs["duration_s"],
        }


def estimate(
    duration_s: float,
    src_width: int,
    src_height: int,
    height: int,
    codec: str,
    preset: str = "medium",
    fps: float | None = None,
    accel: Accel = "cpu",
    max_cpu: float = 2.0,
) -> Estimate:
    """The resources one rendition needs; raises ``ValueError`` for an unknown codec."""
    if codec not in CODEC_COST:
        raise ValueError(f"unknown codec {codec!r}; expected one of {sorted(CODEC_COST)}")
    width = scaled_width(src_width, src_height, height)
    pixels = width * height
    rate = fps if fps and fps > 0 else DEFAULT_FPS
    frames = max(1.0, max(0.0, duration_s) * rate)
    gigapixels = pixels * frames / 1e9
    preset_factor = PRESET_FACTOR.get(preset, 1.0)
    megapixels = pixels / 1e6
    if accel == "gpu":
        cpu_seconds = gigapixels * GPU_CPU_SECONDS_PER_GIGAPIXEL
        cpu = cpu_max = min(max_cpu, 1.0)
        memory = 256 + megapixels * 64
        resources: dict[str, Any] = {
            "cpu": cpu,
            "memory_mb": int(step_up(memory, 64)),
            "gpu_memory_mb": int(step_up(256 + megapixels * 128 * CODEC_MEMORY[codec], 64)),
        }
    else:
        cpu_seconds = gigapixels * CPU_SECONDS_PER_GIGAPIXEL * CODEC_COST[codec] * preset_factor
        cpu_max = min(_threads_useful(pixels), max_cpu)
        cpu = cores_for(cpu_seconds, cpu_max)
        memory = 192 + megapixels * 150 * CODEC_MEMORY[codec]
        resources = {"cpu": cpu, "memory_mb": int(step_up(memory, 64))}
    inputs = {
        "model": MODEL,
        "duration_s": round(duration_s, 3),
        "src_width": src_width,
        "src_height": src_height,
        "width": width,
        "height": height,
        "fps": rate,
        "codec": codec,
        "codec_cost": CODEC_COST[codec],
        "preset": preset,
        "preset_factor": preset_factor,
        "accel": accel,
        "max_cpu": max_cpu,
        "gigapixels": round(gigapixels, 6),
    }
    return Estimate(
        resources=resources,
        cpu_seconds=round(cpu_seconds, 3),
        expected_s=round(cpu_seconds / resources["cpu"], 3),
        inputs=inputs,
        cpu_max=cpu_max,
    )


def estimate_grid(
    duration_s: float,
    src_width: int,
    src_height: int,
    fps: float | None,
    max_cpu: float,
    heights: tuple[int, ...] = STANDARD_HEIGHTS,
) -> dict[str, Any]:
    """``{"h264_720": resources, "h264_720_gpu": resources, ...}`` and the shared inputs."""
    grid: dict[str, Any] = {}
    for codec in CODEC_COST:
        for height in heights:
            for accel in ("cpu", "gpu"):
                est = estimate(
                    duration_s,
                    src_width,
                    src_height,
                    height,
                    codec,
                    fps=fps,
                    accel=accel,
                    max_cpu=max_cpu,
                )
                suffix = "_gpu" if accel == "gpu" else ""
                grid[f"{codec}_{height}{suffix}"] = {
                    **est.resources,
                    ESTIMATE_KEY: est.declared_inputs(),
                }
    return {
        "estimates": grid,
        "estimate_inputs": {
            "model": MODEL,
            "duration_s": round(duration_s, 3),
            "src_width": src_width,
            "src_height": src_height,
            "fps": fps or DEFAULT_FPS,
            "preset": "medium",
            "max_cpu": max_cpu,
            "codec_cost": dict(CODEC_COST),
        },
    }
