"""``media.transcode``: one rendition of a source video, as an MP4 file reference.

Input: ``source`` (file URI or path; ``source_checksum`` optional sha256), ``height``,
``codec`` (``h264`` | ``h265``), ``crf`` or ``bitrate_kbps``, ``preset`` (x264 names),
optional ``name`` (default ``<height>p_<codec>``), ``output_dir``, ``accel`` (``auto``: NVENC
when the task was pinned to a GPU and this worker has NVENC, else the cpu; ``cpu``; ``gpu``:
NVENC or a retryable failure), ``keyframe_s`` and ``degrade_on_retry`` (after a failed
attempt, use ``degraded_preset``: e.g. medium -> veryfast; the output says so). A definition
says better what a retry changes with ``retryInputChanges`` (ADR 71): the scheduler then puts
the changed input in each attempt's ``task.scheduled`` and this worker just runs it, as the
media example does; the flag stays for definitions registered with it.

Output: ``{uri, path, size, sha256}`` of ``<output_dir>/<name>.mp4`` with what ffprobe reads
back from it (``width``, ``height``, ``video_codec``, ``bandwidth``, ``codecs``), the settings
used, the cost ``estimate`` (inputs included), the ``declared`` resources (with ``learned`` when
the dispatcher corrected them), ``elapsed_s``, and ``cost``, what the learned cost is learned
from (ADR 66): ``estimated_cpu_seconds`` (the estimate the task was placed by: its declared
resources' ``inputs.cpu_seconds``, else this worker's own), ``measured_cpu_seconds`` and
``peak_memory_mb`` (ffmpeg's own, ``proc.Usage``), ``ratio`` (measured / estimated) and
``encode_s`` (ffmpeg's wall time). ffmpeg writes
``.<name>.part.mp4`` and the file is renamed into place only after ffmpeg succeeded; a failed
or cancelled attempt removes its part file. Progress: percent of the probed duration encoded,
from ffmpeg's ``-progress`` stream, as ``ctx.progress`` heartbeats.
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path
from typing import Any, cast

from es_sched.domain.learned_cost import ESTIMATE_KEY
from es_sched.workers.media import cost, probe
from es_sched.workers.media.command import (
    PRESETS,
    Codec,
    ProgressParser,
    Rendition,
    degraded_preset,
    encoder_for,
    transcode_command,
)
from es_sched.workers.media.files import file_ref, open_ref, part_path, safe_name
from es_sched.workers.media.proc import Usage, run_ffmpeg
from es_sched.workers.media.toolkit import JSON, Throttle, Toolkit, integer, number, text
from es_sched.workers.sdk import TaskContext, TaskFailure


def rendition_of(task: JSON, preset: str) -> Rendition:
    bitrate = None if task.get("bitrate_kbps") is None else integer(task, "bitrate_kbps")
    keyframe_s = number(task, "keyframe_s", 2.0) if task.get("keyframe_s", 2.0) else None
    try:
        return Rendition(
            height=integer(task, "height"),
            codec=cast(Codec, text(task, "codec", "h264")),  # Rendition checks the name
            crf=None if bitrate is not None else integer(task, "crf", 23),
            bitrate_kbps=bitrate,
            preset=preset,
            audio_kbps=integer(task, "audio_kbps", 128),
            keyframe_s=keyframe_s,
        )
    except ValueError as exc:
        raise TaskFailure(f"bad rendition input: {exc}", retryable=False) from exc


def _use_gpu(ctx: TaskContext, task: JSON, kit: Toolkit, codec: Codec) -> tuple[bool, str]:
    accel = task.get("accel", "auto")
    if accel not in ("auto", "cpu", "gpu"):
        raise TaskFailure(f"input 'accel' must be auto, cpu or gpu, got {accel!r}", False)
    if accel == "cpu":
        return False, "accel=cpu"
    encoder = encoder_for(codec, gpu=True)
    if ctx.gpu is None:
        why = "not pinned to a GPU (declare gpu_memory_mb to get one)"
    elif not kit.nvenc.available:
        why = kit.nvenc.reason
    elif encoder not in kit.nvenc.encoders:
        why = f"ffmpeg has no {encoder}"
    else:
        return True, f"{encoder} on GPU {ctx.gpu}"
    if accel == "gpu":
        raise TaskFailure(f"accel=gpu but {why}", retryable=True)
    return False, why


def transcode(ctx: TaskContext, task: JSON, kit: Toolkit) -> JSON:
    started = time.monotonic()
    source = open_ref(task.get("source"), task.get("source_checksum"), "source")
    src = probe.probe(source, kit.ffprobe)
    preset = text(task, "preset", "medium")
    if preset not in PRESETS:
        raise TaskFailure(f"input 'preset' must be one of {', '.join(PRESETS)}", False)
    degraded: JSON | None = None
    if task.get("degrade_on_retry") is True and ctx.attempt > 1:
        faster = degraded_preset(preset)
        degraded = {"from": preset, "to": faster, "attempt": ctx.attempt}
        preset = faster
    r = rendition_of(task, preset)
    gpu, why = _use_gpu(ctx, task, kit, r.codec)
    est = cost.estimate(
        src["duration"],
        src["width"],
        src["height"],
        r.height,
        r.codec,
        r.preset,
        fps=src["fps"],
        accel="gpu" if gpu else "cpu",
        max_cpu=kit.settings.max_cpu,
    )
    declared = float(ctx.resources.get("cpu") or est.resources["cpu"])
    threads = max(1, math.ceil(declared))
    name = safe_name(str(task.get("name") or f"{r.height}p_{r.codec}"))
    final = kit.out_dir(ctx, task) / f"{name}.mp4"
    part = part_path(final)
    part.unlink(missing_ok=True)  # a crashed earlier attempt's leftovers
    argv = transcode_command(kit.ffmpeg, source, part, r, gpu=gpu, threads=threads)
    parser = ProgressParser(src["duration"])
    report = Throttle(ctx.progress)

    def on_line(line: str) -> None:
        percent = parser.feed(line)
        if percent is not None and not ctx.cancelled:  # SIGTERM makes ffmpeg report "end"
            report(percent, f"{name} {parser.speed}".strip())

    try:
        usage = run_ffmpeg(
            argv, ctx.cancel_event, on_line, env=ctx.env, grace_s=kit.settings.kill_grace_s
        )
        os.replace(part, final)
    finally:
        part.unlink(missing_ok=True)
    result = _output(final, name, r, gpu, why, ctx, kit, degraded, est, started)
    result["cost"] = measured_cost(ctx.resources, est, usage)
    return result


def measured_cost(declared: JSON, est: cost.Estimate, usage: Usage) -> JSON:
    """The output's ``cost``: the estimate the task was placed by against what ffmpeg used.

    The ratio is to the estimate the task declared (the probe's, which the dispatcher corrects),
    not to this worker's own with the task's actual preset: the learned ratio must scale the
    figure it is applied to. A task that declared no estimate is compared with this worker's."""
    inputs = declared.get(ESTIMATE_KEY)
    placed = inputs.get("cpu_seconds") if isinstance(inputs, dict) else None
    if isinstance(placed, int | float) and not isinstance(placed, bool) and placed > 0:
        estimated, source = float(placed), "declared"
    else:
        estimated, source = est.cpu_seconds, "worker"
    return {
        "model": cost.MODEL,
        "estimate_of": source,
        "estimated_cpu_seconds": round(estimated, 3),
        "measured_cpu_seconds": round(usage.cpu_s, 3),
        "peak_memory_mb": round(usage.peak_memory_mb, 1),
        "ratio": round(usage.cpu_s / estimated, 4) if estimated > 0 else None,
        "encode_s": round(usage.wall_s, 3),
    }


def _output(
    final: Path,
    name: str,
    r: Rendition,
    gpu: bool,
    why: str,
    ctx: TaskContext,
    kit: Toolkit,
    degraded: JSON | None,
    est: cost.Estimate,
    started: float,
) -> JSON:
    out = probe.probe(final, kit.ffprobe)
    if out["height"] != r.height:
        raise TaskFailure(f"{final.name} came out {out['height']} high, not {r.height}")
    result: dict[str, Any] = file_ref(
        final,
        name=name,
        kind="rendition",
        height=out["height"],
        width=out["width"],
        codec=r.codec,
        video_codec=out["video_codec"],
        audio_codec=out["audio_codec"],
        duration=out["duration"],
        fps=out["fps"],
        bandwidth=out["bitrate"],
        codecs=out["codecs"],
        encoder=encoder_for(r.codec, gpu),
        accel="gpu" if gpu else "cpu",
        accel_reason=why,
        gpu=ctx.gpu if gpu else None,
        preset=r.preset,
        crf=r.crf if r.bitrate_kbps is None else None,
        bitrate_kbps=r.bitrate_kbps,
        degraded=degraded,
        estimate=est.as_dict(),
        declared=dict(ctx.resources),
        elapsed_s=round(time.monotonic() - started, 3),
    )
    return result
