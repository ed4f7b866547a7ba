"""``media.thumbnail``: a few frames of a video, tiled into one JPEG sprite or as JPEG files.

Input: ``source`` (+ ``source_checksum``), ``count`` (default 4, 1-100), ``width`` of one
thumbnail (default 320; the height keeps the aspect ratio), ``mode`` (``sprite``, the default:
one image of ``columns x rows`` tiles, left to right then top to bottom; ``frames``: one file
each), ``name`` (default ``thumbs``), ``output_dir``. Frames are taken at an even interval
over the probed duration (ffmpeg's ``fps`` filter), tiled with its ``tile`` filter.

Output: ``{kind: "thumbnails", mode, count, interval_s}`` plus ``sprite`` (a file reference
with its pixel size, ``columns``, ``rows``, ``tile_width``, ``tile_height``) or ``frames`` (a
list of file references). Files are written under a ``.part`` name and renamed into place.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from es_sched.workers.media import probe
from es_sched.workers.media.files import file_ref, open_ref, part_path, safe_name
from es_sched.workers.media.proc import run_ffmpeg
from es_sched.workers.media.toolkit import JSON, Toolkit, integer, text
from es_sched.workers.sdk import TaskContext, TaskFailure


def grid(count: int) -> tuple[int, int]:
    """Columns and rows of a sprite of ``count`` tiles: as square as possible."""
    columns = math.ceil(math.sqrt(count))
    return columns, math.ceil(count / columns)


def sprite_command(
    ffmpeg: str, source: Path, output: Path, duration_s: float, count: int, width: int
) -> list[str]:
    columns, rows = grid(count)
    vf = f"fps={count}/{duration_s:.3f},scale={width}:-2,tile={columns}x{rows}"
    return [
        ffmpeg,
        "-hide_banner",
        "-nostdin",
        "-y",
        "-loglevel",
        "error",
        "-i",
        str(source),
        "-vf",
        vf,
        "-frames:v",
        "1",
        "-q:v",
        "3",
        "-update",
        "1",
        "-f",
        "image2",
        str(output),
    ]


def frames_command(
    ffmpeg: str, source: Path, pattern: Path, duration_s: float, count: int, width: int
) -> list[str]:
    return [
        ffmpeg,
        "-hide_banner",
        "-nostdin",
        "-y",
        "-loglevel",
        "error",
        "-i",
        str(source),
        "-vf",
        f"fps={count}/{duration_s:.3f},scale={width}:-2",
        "-frames:v",
        str(count),
        "-q:v",
        "3",
        "-f",
        "image2",
        str(pattern),
    ]


def thumbnail(ctx: TaskContext, task: JSON, kit: Toolkit) -> JSON:
    source = open_ref(task.get("source"), task.get("source_checksum"), "source")
    src = probe.probe(source, kit.ffprobe)
    count, width = integer(task, "count", 4), integer(task, "width", 320)
    mode = text(task, "mode", "sprite")
    if not 1 <= count <= 100 or not 16 <= width <= 3840:
        raise TaskFailure("count must be 1-100 and width 16-3840", retryable=False)
    if mode not in ("sprite", "frames"):
        raise TaskFailure(f"mode must be sprite or frames, got {mode!r}", retryable=False)
    name = safe_name(str(task.get("name") or "thumbs"))
    folder = kit.out_dir(ctx, task)
    duration = float(src["duration"])
    tile_height = max(2, round(width * src["height"] / src["width"] / 2) * 2)
    out: JSON = {"kind": "thumbnails", "mode": mode, "count": count}
    out["interval_s"] = round(duration / count, 3)
    grace = kit.settings.kill_grace_s
    if mode == "sprite":
        final = folder / f"{name}.jpg"
        part = part_path(final)
        try:
            argv = sprite_command(kit.ffmpeg, source, part, duration, count, width)
            run_ffmpeg(argv, ctx.cancel_event, env=ctx.env, grace_s=grace)
            os.replace(part, final)
        finally:
            part.unlink(missing_ok=True)
        columns, rows = grid(count)
        out["sprite"] = file_ref(
            final,
            width=columns * width,
            height=rows * tile_height,
            columns=columns,
            rows=rows,
            tile_width=width,
            tile_height=tile_height,
        )
        return out
    pattern = folder / f".{name}.part_%02d.jpg"
    written: list[Path] = []
    try:
        argv = frames_command(kit.ffmpeg, source, pattern, duration, count, width)
        run_ffmpeg(argv, ctx.cancel_event, env=ctx.env, grace_s=grace)
        for i in range(1, count + 1):
            part = folder / f".{name}.part_{i:02d}.jpg"
            if not part.exists():
                break  # a clip shorter than count frames yields fewer
            final = folder / f"{name}_{i:02d}.jpg"
            os.replace(part, final)
            written.append(final)
    finally:
        for leftover in folder.glob(f".{name}.part_*.jpg"):
            leftover.unlink(missing_ok=True)
    if not written:
        raise TaskFailure(f"ffmpeg wrote no frames of {source.name}", retryable=False)
    out["frames"] = [
        file_ref(p, width=width, height=tile_height, time_s=round(i * duration / count, 3))
        for i, p in enumerate(written)
    ]
    out["count"] = len(written)
    return out
