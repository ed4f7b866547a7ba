"""``media.write_asset``: the asset record, one JSON file listing every output of the workflow.

Input: ``asset_id``; ``source`` (URI) and ``probe`` (the ``media.probe`` output);
``renditions`` (``media.transcode`` outputs, any nesting, see ``package.find_renditions``);
``thumbnails`` (the ``media.thumbnail`` output; null or empty when that optional task failed);
``package`` (the ``media.package`` output, optional); ``output_dir``.

Every output file is read again: its size and sha256 go into the record, and a file whose
sha256 differs from the one its task reported fails the task for good (it changed after it was
written). Renditions are probed again for their properties; HLS playlists and segments are
listed with size and sha256 each. The record goes to ``<output_dir>/<asset_id>.asset.json``
(written under a temporary name, then renamed).

Output: ``{uri, path, size, sha256}`` of the record, ``asset_id``, ``outputs`` (how many files
it lists) and ``bytes`` (their total size).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from es_sched.workers.media import probe
from es_sched.workers.media.files import (
    file_ref,
    path_of,
    safe_name,
    write_atomically,
)
from es_sched.workers.media.package import find_renditions, playlist_files
from es_sched.workers.media.toolkit import JSON, Toolkit, text
from es_sched.workers.sdk import TaskContext, TaskFailure

RENDITION_KEEP = ("name", "codec", "encoder", "preset", "crf", "bitrate_kbps", "accel", "degraded")


def _checked(ref: Any, what: str, **extra: Any) -> JSON:
    """A fresh reference to an output file that must still match its reported sha256."""
    path = path_of(ref, what)
    if not path.is_file():
        raise TaskFailure(f"{what} {path} is gone", retryable=False)
    fresh = file_ref(path, **extra)  # hashed once: this is the check and the record
    reported = ref.get("sha256") if isinstance(ref, dict) else None
    if reported and reported != fresh["sha256"]:
        raise TaskFailure(
            f"{what} {path} has sha256 {fresh['sha256']}, but its task reported {reported}",
            retryable=False,
        )
    return fresh


def _thumbnails(value: Any) -> list[JSON]:
    if not isinstance(value, dict):
        return []
    refs = [value["sprite"]] if isinstance(value.get("sprite"), dict) else []
    refs += [f for f in value.get("frames") or [] if isinstance(f, dict)]
    keep = ("width", "height", "columns", "rows", "tile_width", "tile_height", "time_s")
    return [
        _checked(r, "thumbnail", kind="thumbnail", **{k: r[k] for k in keep if k in r})
        for r in refs
    ]


def _package(value: Any) -> JSON | None:
    if not isinstance(value, dict) or not value.get("uri"):
        return None
    master = _checked(value, "HLS master playlist", kind="hls_master")
    variants = []
    for v in value.get("variants") or []:
        playlist_path = path_of(v.get("playlist"), "HLS playlist")
        segments = [
            file_ref(p, kind="hls_segment" if d else "hls_init", duration=d)
            for p, d in playlist_files(playlist_path)
        ]
        variants.append(
            {
                "name": v.get("name"),
                "bandwidth": v.get("bandwidth"),
                "resolution": f"{v.get('width')}x{v.get('height')}",
                "codecs": v.get("codecs"),
                "playlist": _checked(v.get("playlist"), "HLS playlist", kind="hls_playlist"),
                "segments": segments,
            }
        )
    return {"master": master, "variants": variants}


def _files(record: JSON) -> list[JSON]:
    files = list(record["renditions"]) + list(record["thumbnails"])
    if record["package"]:
        files.append(record["package"]["master"])
        for v in record["package"]["variants"]:
            files += [v["playlist"], *v["segments"]]
    return files


def write_asset(ctx: TaskContext, task: JSON, kit: Toolkit) -> JSON:
    asset_id = text(task, "asset_id")
    probed = task.get("probe") if isinstance(task.get("probe"), dict) else {}
    assert isinstance(probed, dict)
    renditions = []
    for r in find_renditions(task.get("renditions")):
        ref = _checked(r, f"rendition {r.get('name', r['uri'])}", kind="rendition")
        props = probe.probe(Path(ref["path"]), kit.ffprobe)
        renditions.append({**ref, **props, **{k: r[k] for k in RENDITION_KEEP if k in r}})
    if not renditions:
        raise TaskFailure("input 'renditions' holds no transcode outputs", retryable=False)
    record: JSON = {
        "asset_id": asset_id,
        "workflow_id": ctx.workflow_id,
        "written_by": {"task_id": ctx.task_id, "attempt": ctx.attempt, "worker": ctx.worker_id},
        "source": {
            **{k: v for k, v in probed.items() if k not in ("estimates", "estimate_inputs")},
            "uri": task.get("source") or probed.get("uri"),
        },
        "renditions": renditions,
        "thumbnails": _thumbnails(task.get("thumbnails")),
        "package": _package(task.get("package")),
    }
    files = _files(record)
    record["outputs"] = len(files)
    record["bytes"] = sum(int(f["size"]) for f in files)
    final = kit.out_dir(ctx, task) / f"{safe_name(asset_id)}.asset.json"
    write_atomically(final, json.dumps(record, indent=2, sort_keys=True).encode() + b"\n")
    return {
        **file_ref(final),
        "kind": "asset",
        "asset_id": asset_id,
        "outputs": record["outputs"],
        "bytes": record["bytes"],
    }
