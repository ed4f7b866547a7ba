"""ffprobe: what a media file is (duration, size in pixels, frame rate, codecs, bitrate).

``probe(path)`` runs ``ffprobe -print_format json -show_format -show_streams`` and
``parse_probe`` turns its JSON into one flat dict. A file ffprobe cannot read, or one without a
video stream and a duration (text, audio only, a still image), is a non-retryable
``TaskFailure``: another attempt would read the same bytes. ``hls_codecs`` gives the RFC 8216
``CODECS`` names (``avc1.64001f``, ``hvc1.1.6.L93.B0``, ``mp4a.40.2``) from a stream's profile
and level, for the master playlist.
"""

from __future__ import annotations

import json
import math
from fractions import Fraction
from pathlib import Path
from typing import Any

from es_sched.workers.media.proc import run_quick, tool
from es_sched.workers.sdk import TaskFailure

JSON = dict[str, Any]
H264_PROFILES = {  # profile name -> (profile_idc, constraint flags)
    "Baseline": (66, 0x00),
    "Constrained Baseline": (66, 0x40),
    "Main": (77, 0x40),
    "Extended": (88, 0x00),
    "High": (100, 0x00),
    "High 10": (110, 0x00),
    "High 4:2:2": (122, 0x00),
    "High 4:4:4 Predictive": (244, 0x00),
}
HEVC_PROFILES = {"Main": (1, 6), "Main 10": (2, 4), "Main Still Picture": (3, 2)}
AAC_PROFILES = {"LC": 2, "HE-AAC": 5, "HE-AACv2": 29}
# What ffmpeg decodes as "video" but is not: text shown as video (a .txt file is read by the
# "tty" demuxer), and still images (one frame in an image demuxer).
TEXT_CODECS = frozenset({"ansi", "bintext", "xbin", "idf"})
IMAGE_FORMATS = frozenset({"image2", "tty", "bin", "xbin", "idf", "adf"})


def _number(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(number) else number


def _rate(text: Any) -> float | None:
    try:
        rate = Fraction(str(text))
    except (ValueError, ZeroDivisionError):
        return None
    return round(float(rate), 3) if rate > 0 else None


def _rotation(stream: JSON) -> int:
    for side in stream.get("side_data_list") or []:
        if "rotation" in side:
            return int(_number(side["rotation"]) or 0)
    return int(_number((stream.get("tags") or {}).get("rotate")) or 0)


def hls_codecs(stream: JSON) -> str | None:
    """The ``CODECS`` attribute value of one stream, or None for codecs HLS does not name."""
    codec, profile = stream.get("codec_name"), str(stream.get("profile") or "")
    level = int(_number(stream.get("level")) or 0)
    if codec == "h264" and profile in H264_PROFILES and level > 0:
        idc, flags = H264_PROFILES[profile]
        return f"avc1.{idc:02x}{flags:02x}{level:02x}"
    if codec == "hevc" and profile in HEVC_PROFILES and level > 0:
        idc, compat = HEVC_PROFILES[profile]
        return f"hvc1.{idc}.{compat}.L{level}.B0"
    if codec == "aac":
        return f"mp4a.40.{AAC_PROFILES.get(profile, 2)}"
    if codec == "mp3":
        return "mp4a.40.34"
    return None


def parse_probe(doc: JSON, name: str = "input") -> JSON:
    """ffprobe's JSON -> the properties media tasks pass on; non-video fails for good."""
    streams = [s for s in doc.get("streams") or [] if isinstance(s, dict)]
    videos = [
        s
        for s in streams
        if s.get("codec_type") == "video" and not (s.get("disposition") or {}).get("attached_pic")
    ]
    audios = [s for s in streams if s.get("codec_type") == "audio"]
    fmt = doc.get("format") or {}
    if not videos:
        raise TaskFailure(f"{name} is not a video: no video stream", retryable=False)
    video = videos[0]
    format_name = str(fmt.get("format_name") or "")
    if video.get("codec_name") in TEXT_CODECS or format_name in IMAGE_FORMATS:
        raise TaskFailure(f"{name} is not a video: ffprobe reads it as {format_name}", False)
    if format_name.endswith("_pipe"):  # png_pipe, jpeg_pipe, ...: a still image
        raise TaskFailure(f"{name} is not a video: an image ({format_name})", False)
    duration = _number(fmt.get("duration")) or _number(video.get("duration"))
    if not duration or duration <= 0:
        raise TaskFailure(f"{name} is not a video: no duration (a still image?)", False)
    width, height = int(video.get("width") or 0), int(video.get("height") or 0)
    if width <= 0 or height <= 0:
        raise TaskFailure(f"{name} is not a video: no frame size", retryable=False)
    rotation = _rotation(video)
    if abs(rotation) % 180 == 90:  # displayed on its side: what players show is rotated
        width, height = height, width
    fps = _rate(video.get("avg_frame_rate")) or _rate(video.get("r_frame_rate"))
    audio = audios[0] if audios else {}
    bitrate = _number(fmt.get("bit_rate")) or _number(video.get("bit_rate"))
    codecs = [c for c in (hls_codecs(video), hls_codecs(audio) if audio else None) if c]
    return {
        "format": fmt.get("format_name"),
        "duration": round(duration, 3),
        "width": width,
        "height": height,
        "rotation": rotation,
        "fps": fps,
        "frame_rate": video.get("avg_frame_rate") or video.get("r_frame_rate"),
        "video_codec": video.get("codec_name"),
        "video_profile": video.get("profile"),
        "video_level": video.get("level"),
        "pix_fmt": video.get("pix_fmt"),
        "audio_codec": audio.get("codec_name"),
        "audio_channels": audio.get("channels"),
        "audio_sample_rate": int(_number(audio.get("sample_rate")) or 0) or None,
        "bitrate": int(bitrate) if bitrate else None,
        "codecs": ",".join(codecs) if codecs else None,
    }


def probe(path: Path, ffprobe: str | None = None) -> JSON:
    """Run ffprobe on a local file; see ``parse_probe`` for the result and failures."""
    argv = [
        ffprobe or tool("ffprobe"),
        "-v",
        "error",
        "-print_format",
        "json",
        "-show_format",
        "-show_streams",
        str(path),
    ]
    done = run_quick(argv)
    if done.returncode != 0:
        reason = done.stderr.strip().splitlines()[-1:] or [f"exit {done.returncode}"]
        if not path.exists():
            raise TaskFailure(f"{path} does not exist", retryable=False)
        raise TaskFailure(f"{path.name} is not a video ffprobe can read: {reason[0]}", False)
    try:
        doc = json.loads(done.stdout or "{}")
    except json.JSONDecodeError as exc:
        raise TaskFailure(f"ffprobe printed no JSON for {path.name}: {exc}") from exc
    return parse_probe(doc, path.name)
