"""The ffmpeg command of one rendition, and reading ffmpeg's ``-progress`` stream. Pure.

``transcode_command`` maps a ``Rendition`` (height, codec, CRF or bitrate, preset) to an
argument list: ``libx264``/``libx265`` on the cpu, ``h264_nvenc``/``hevc_nvenc`` on a GPU
(``-gpu 0``: the task's environment makes its pinned device the only visible one), scaled to
the height with an even width that keeps the aspect ratio, keyframes every ``keyframe_s`` so
HLS segments cut cleanly, AAC audio when the source has any, and ``-progress pipe:1
-nostats`` so progress arrives as ``key=value`` blocks on stdout. ``ProgressParser`` turns
those blocks into percent done against the probed duration. ``degraded_preset`` is the faster
preset a retry may fall back to.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

Codec = Literal["h264", "h265"]
CODECS: tuple[Codec, ...] = ("h264", "h265")
CPU_ENCODERS = {"h264": "libx264", "h265": "libx265"}
GPU_ENCODERS = {"h264": "h264_nvenc", "h265": "hevc_nvenc"}
PRESETS = (
    "ultrafast",
    "superfast",
    "veryfast",
    "faster",
    "fast",
    "medium",
    "slow",
    "slower",
    "veryslow",
    "placebo",
)
NVENC_PRESETS = {  # x264 names -> NVENC p1 (fastest) .. p7 (best)
    "ultrafast": "p1",
    "superfast": "p1",
    "veryfast": "p2",
    "faster": "p3",
    "fast": "p3",
    "medium": "p4",
    "slow": "p5",
    "slower": "p6",
    "veryslow": "p7",
    "placebo": "p7",
}


@dataclass(frozen=True)
class Rendition:
    height: int
    codec: Codec = "h264"
    crf: int | None = 23  # quality mode unless bitrate_kbps is set
    bitrate_kbps: int | None = None
    preset: str = "medium"
    audio_kbps: int = 128
    keyframe_s: float | None = 2.0

    def __post_init__(self) -> None:
        if self.codec not in CODECS:
            raise ValueError(f"codec must be one of {', '.join(CODECS)}, got {self.codec!r}")
        if self.preset not in PRESETS:
            raise ValueError(f"preset must be one of {', '.join(PRESETS)}, got {self.preset!r}")
        if not 16 <= self.height <= 4320 or self.height % 2:
            raise ValueError(f"height must be an even number of pixels 16-4320, not {self.height}")
        if self.bitrate_kbps is None and (self.crf is None or not 0 <= self.crf <= 51):
            raise ValueError("give crf (0-51) or bitrate_kbps")
        if self.bitrate_kbps is not None and self.bitrate_kbps <= 0:
            raise ValueError("bitrate_kbps must be positive")


def encoder_for(codec: Codec, gpu: bool) -> str:
    return (GPU_ENCODERS if gpu else CPU_ENCODERS)[codec]


def transcode_command(
    ffmpeg: str,
    source: Path,
    output: Path,
    r: Rendition,
    gpu: bool = False,
    threads: int | None = None,
    progress_period_s: float = 0.5,
) -> list[str]:
    """ffmpeg's argument list: ``source`` -> an MP4 at ``output`` (the caller's temp name)."""
    argv = [
        ffmpeg,
        "-hide_banner",
        "-nostdin",
        "-y",
        "-loglevel",
        "error",
        "-i",
        str(source),
        "-map",
        "0:v:0",
        "-map",
        "0:a:0?",
        "-vf",
        f"scale=-2:{r.height}",
        "-c:v",
        encoder_for(r.codec, gpu),
        "-pix_fmt",
        "yuv420p",
    ]
    if gpu:
        argv += ["-gpu", "0", "-preset", NVENC_PRESETS[r.preset], "-rc", "vbr"]
        if r.bitrate_kbps is None:
            argv += ["-cq", str(r.crf), "-b:v", "0"]
    else:
        argv += ["-preset", r.preset]
        if r.bitrate_kbps is None:
            argv += ["-crf", str(r.crf)]
        if r.codec == "h265":  # x265 sizes its thread pool itself; keep it to our share
            params = "log-level=error" + (f":pools={threads}" if threads else "")
            argv += ["-x265-params", params]
        elif threads:
            argv += ["-threads", str(threads)]
    if r.bitrate_kbps is not None:
        kbps = r.bitrate_kbps
        argv += ["-b:v", f"{kbps}k", "-maxrate", f"{kbps * 3 // 2}k", "-bufsize", f"{kbps * 2}k"]
    if r.codec == "h265":
        argv += ["-tag:v", "hvc1"]  # the sample entry Apple players and HLS expect
    if r.keyframe_s:
        argv += ["-force_key_frames", f"expr:gte(t,n_forced*{r.keyframe_s:g})"]
    argv += [
        "-c:a",
        "aac",
        "-b:a",
        f"{r.audio_kbps}k",
        "-ac",
        "2",
        "-movflags",
        "+faststart",
        "-f",
        "mp4",
        "-progress",
        "pipe:1",
        "-nostats",
        "-stats_period",
        f"{progress_period_s:g}",
        str(output),
    ]
    return argv


def degraded_preset(preset: str) -> str:
    """A faster preset for a retry: anything slower than veryfast -> veryfast, else ultrafast."""
    if PRESETS.index(preset) > PRESETS.index("veryfast"):
        return "veryfast"
    return "ultrafast"


@dataclass
class ProgressParser:
    """Feed ffmpeg's ``-progress`` lines; a finished block yields percent done (0-100)."""

    duration_s: float
    block: dict[str, str] = field(default_factory=dict)
    speed: str = ""  # ffmpeg's own "2.5x" of the last block

    def feed(self, line: str) -> float | None:
        key, sep, value = line.strip().partition("=")
        if not sep:
            return None
        self.block[key] = value.strip()
        if key != "progress":
            return None
        block, self.block = self.block, {}
        self.speed = block.get("speed", self.speed)
        if value.strip() == "end":
            return 100.0
        done_us = _int(block.get("out_time_us")) or _int(block.get("out_time_ms"))
        if done_us is None or self.duration_s <= 0:
            return None
        return max(0.0, min(100.0, done_us / 1e6 / self.duration_s * 100))


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:  # "N/A" before the first frame is written
        return None
