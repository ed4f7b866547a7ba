"""``media.package``: HLS over the renditions, with a master playlist listing every one.

Input: ``renditions``: ``media.transcode`` outputs in any nesting (a list, a JOIN's ``{ref:
output}``, a map of SWITCH cases whose untaken ones are null); ``name`` (default ``hls``),
``segment_s`` (default ``ES_SCHED_MEDIA_HLS_SEGMENT_S``), ``output_dir``. Each rendition is
checked against its sha256, then remuxed without re-encoding (``-c copy``) into
``<name>/<rendition>/index.m3u8`` and segments: MPEG-TS for H.264, fMP4 for H.265 (which HLS
carries only in fMP4). The master playlist lists every variant with ``BANDWIDTH`` (the peak
segment bitrate, as RFC 8216 asks), ``AVERAGE-BANDWIDTH``, ``RESOLUTION``, ``CODECS`` and
``FRAME-RATE``. Everything is built in ``.<name>.part`` and renamed into place at the end.

Output: ``{kind: "hls", uri, path, size, sha256}`` of the master playlist and ``variants``
(each: ``name``, ``playlist`` reference, the attributes above, ``segments``, ``bytes``).
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from es_sched.workers.media.files import file_ref, open_ref, safe_name, write_atomically
from es_sched.workers.media.proc import run_ffmpeg
from es_sched.workers.media.toolkit import JSON, Toolkit, number
from es_sched.workers.sdk import TaskContext, TaskFailure

_ATTR = re.compile(r'([A-Z0-9-]+)=("[^"]*"|[^,]*)')


def find_renditions(value: Any) -> list[JSON]:
    """Every transcode output inside ``value`` (by ``kind`` or by shape), highest first."""
    found: dict[str, JSON] = {}

    def walk(v: Any) -> Iterator[JSON]:
        if isinstance(v, dict):
            if v.get("kind") == "rendition" or {"uri", "sha256", "height"} <= v.keys():
                yield v
                return
            for child in v.values():
                yield from walk(child)
        elif isinstance(v, list):
            for child in v:
                yield from walk(child)

    for r in walk(value):
        found.setdefault(str(r["uri"]), r)
    return sorted(found.values(), key=lambda r: (-int(r["height"]), -int(r.get("bandwidth") or 0)))


def hls_command(ffmpeg: str, source: Path, folder: Path, segment_s: float, fmp4: bool) -> list[str]:
    ext = "m4s" if fmp4 else "ts"
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
        "0",
        "-c",
        "copy",
        "-f",
        "hls",
        "-hls_time",
        f"{segment_s:g}",
        "-hls_playlist_type",
        "vod",
        "-hls_flags",
        "independent_segments",
        "-hls_segment_type",
        "fmp4" if fmp4 else "mpegts",
        "-hls_segment_filename",
        str(folder / f"seg_%04d.{ext}"),
    ]
    if fmp4:
        argv += ["-hls_fmp4_init_filename", "init.mp4"]
    return [*argv, str(folder / "index.m3u8")]


def playlist_files(playlist: Path) -> list[tuple[Path, float | None]]:
    """The files a media playlist names (segments, and the fMP4 init section) with durations."""
    files: list[tuple[Path, float | None]] = []
    duration: float | None = None
    for raw in playlist.read_text().splitlines():
        line = raw.strip()
        if line.startswith("#EXTINF:"):
            duration = float(line[8:].split(",")[0])
        elif line.startswith("#EXT-X-MAP:"):
            uri = dict(attributes(line[11:])).get("URI", "").strip('"')
            files.append((playlist.parent / uri, None))
        elif line and not line.startswith("#"):
            files.append((playlist.parent / line, duration))
            duration = None
    return files


def bandwidths(files: list[tuple[Path, float | None]]) -> tuple[int, int]:
    """Peak and average bits per second of the media segments (RFC 8216 leaves the fMP4 init
    section out: a player loads it once)."""
    segments = [(p.stat().st_size, d) for p, d in files if d]
    if not segments:
        return 0, 0
    peak = max(size * 8 / d for size, d in segments)
    average = sum(size for size, _ in segments) * 8 / sum(d for _, d in segments)
    return int(peak), int(average)


def attributes(text: str) -> list[tuple[str, str]]:
    return [(k, v) for k, v in _ATTR.findall(text)]


def master_playlist(variants: list[JSON]) -> str:
    """RFC 8216 master playlist text; each variant needs uri, bandwidth, width, height."""
    fmp4 = any(v.get("fmp4") for v in variants)
    lines = ["#EXTM3U", f"#EXT-X-VERSION:{7 if fmp4 else 3}", "#EXT-X-INDEPENDENT-SEGMENTS"]
    for v in variants:
        attrs = [f"BANDWIDTH={int(v['bandwidth'])}"]
        if v.get("average_bandwidth"):
            attrs.append(f"AVERAGE-BANDWIDTH={int(v['average_bandwidth'])}")
        attrs.append(f"RESOLUTION={int(v['width'])}x{int(v['height'])}")
        if v.get("codecs"):
            attrs.append(f'CODECS="{v["codecs"]}"')
        if v.get("fps"):
            attrs.append(f"FRAME-RATE={float(v['fps']):.3f}")
        lines += ["#EXT-X-STREAM-INF:" + ",".join(attrs), str(v["uri"])]
    return "\n".join(lines) + "\n"


def package(ctx: TaskContext, task: JSON, kit: Toolkit) -> JSON:
    renditions = find_renditions(task.get("renditions"))
    if not renditions:
        raise TaskFailure("input 'renditions' holds no transcode outputs", retryable=False)
    segment_s = number(task, "segment_s", kit.settings.hls_segment_s)
    name = safe_name(str(task.get("name") or "hls"))
    folder = kit.out_dir(ctx, task)
    final, work = folder / name, folder / f".{name}.part"
    shutil.rmtree(work, ignore_errors=True)
    variants: list[JSON] = []
    try:
        for i, r in enumerate(renditions):
            source = open_ref(r, r.get("sha256"), f"rendition {r.get('name', i)}")
            vname = safe_name(str(r.get("name") or f"{r['height']}p_{i}"))
            sub = work / vname
            sub.mkdir(parents=True)
            fmp4 = r.get("video_codec") == "hevc" or r.get("codec") == "h265"
            argv = hls_command(kit.ffmpeg, source, sub, segment_s, fmp4)
            run_ffmpeg(argv, ctx.cancel_event, env=ctx.env, grace_s=kit.settings.kill_grace_s)
            files = playlist_files(sub / "index.m3u8")
            peak, average = bandwidths(files)
            variants.append(
                {
                    "name": vname,
                    "uri": f"{vname}/index.m3u8",
                    "fmp4": fmp4,
                    "bandwidth": peak,
                    "average_bandwidth": average,
                    "width": r["width"],
                    "height": r["height"],
                    "codecs": r.get("codecs"),
                    "fps": r.get("fps"),
                    "segments": sum(1 for _, d in files if d),
                    "bytes": sum(p.stat().st_size for p, _ in files),
                }
            )
            ctx.progress(100 * (i + 1) / len(renditions), f"packaged {vname}")
        write_atomically(work / "master.m3u8", master_playlist(variants).encode())
        shutil.rmtree(final, ignore_errors=True)  # an earlier attempt's complete package
        os.rename(work, final)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for v in variants:
        v["playlist"] = file_ref(final / v["uri"])
    return {
        **file_ref(final / "master.m3u8"),
        "kind": "hls",
        "segment_s": segment_s,
        "variants": variants,
    }
