"""The media handlers against real ffmpeg, on clips ffmpeg generates (testsrc2 + a sine tone).

Handlers are called directly with a real ``TaskContext`` whose reporter records progress (no
broker needed: the SDK's Kafka side is covered by test_worker_sdk). Every output is checked
independently: ffprobe run here, sha256 computed here, the HMAC recomputed here.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

from es_sched.workers import TaskCancelled, TaskFailure
from es_sched.workers.media import Toolkit, gpu
from es_sched.workers.media.asset import write_asset
from es_sched.workers.media.cost import MODEL
from es_sched.workers.media.files import uri_of
from es_sched.workers.media.handlers import probe_source
from es_sched.workers.media.package import package
from es_sched.workers.media.thumbnail import thumbnail
from es_sched.workers.media.transcode import transcode
from testkit.procs import children
from tests.integration.media_harness import JSON, context, make_kit, progress_of

pytestmark = pytest.mark.integration


# -- fixtures -------------------------------------------------------------------------------
def _ffmpeg() -> str:
    found = shutil.which("ffmpeg")
    if found is None or shutil.which("ffprobe") is None:
        pytest.fail("ffmpeg/ffprobe missing: `es-sched stack up` installs them")
    return found


def make_clip(path: Path, seconds: float, size: str, rate: int = 25) -> Path:
    subprocess.run(
        [
            _ffmpeg(),
            "-hide_banner",
            "-loglevel",
            "error",
            "-y",
            "-f",
            "lavfi",
            "-i",
            f"testsrc2=size={size}:rate={rate}:duration={seconds}",
            "-f",
            "lavfi",
            "-i",
            f"sine=frequency=440:sample_rate=48000:duration={seconds}",
            "-c:v",
            "libx264",
            "-preset",
            "ultrafast",
            "-pix_fmt",
            "yuv420p",
            "-c:a",
            "aac",
            "-shortest",
            str(path),
        ],
        check=True,
        timeout=120,
    )
    return path


@pytest.fixture(scope="module")
def clips(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("clips")
    text = folder / "notes.txt"
    text.write_text("this is not a video\n" * 50)
    return {
        "clip": make_clip(folder / "clip.mp4", 3, "640x360"),
        "long": make_clip(folder / "long.mp4", 60, "320x180", rate=15),
        "text": text,
    }


@pytest.fixture(scope="module")
def kit(tmp_path_factory: pytest.TempPathFactory) -> Toolkit:
    return make_kit(tmp_path_factory.mktemp("out"))


def ffprobe_video(path: Path) -> JSON:
    done = subprocess.run(
        [
            "ffprobe",
            "-v",
            "error",
            "-select_streams",
            "v:0",
            "-show_entries",
            "stream=codec_name,width,height",
            "-of",
            "json",
            str(path),
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=30,
    )
    stream: JSON = json.loads(done.stdout)["streams"][0]
    return stream


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def renditions(clips: dict[str, Path], kit: Toolkit) -> dict[str, tuple[JSON, list[float]]]:
    """A 720p H.264 and (second attempt, degraded, declaring a cost estimate as the probe's
    would) a 360p H.265 rendition of the clip."""
    made = {}
    runs: tuple[tuple[str, JSON, int, JSON], ...] = (
        ("720p_h264", {"height": 720, "codec": "h264", "crf": 23, "preset": "medium"}, 1, {}),
        (
            "360p_h265",
            {
                "height": 360,
                "codec": "h265",
                "crf": 28,
                "preset": "medium",
                "degrade_on_retry": True,
            },
            2,
            {"cpu": 1.0, "memory_mb": 320, "inputs": {"model": MODEL, "cpu_seconds": 5.0}},
        ),
    )
    for name, task, attempt, declared in runs:
        ctx = context("media.transcode", attempt=attempt, **declared)
        source = {"source": uri_of(clips["clip"]), "source_checksum": sha256(clips["clip"])}
        out = transcode(ctx, {**source, **task, "name": name}, kit)
        made[name] = (out, progress_of(ctx))
    return made


# -- probe ----------------------------------------------------------------------------------
def test_probe_reads_duration_size_rate_codecs_and_estimates(
    clips: dict[str, Path], kit: Toolkit
) -> None:
    clip = clips["clip"]
    out = probe_source(context("media.probe"), {"uri": uri_of(clip), "checksum": sha256(clip)}, kit)
    assert (out["width"], out["height"], out["fps"]) == (640, 360, 25.0)
    assert out["duration"] == pytest.approx(3.0, abs=0.1)
    assert (out["video_codec"], out["audio_codec"]) == ("h264", "aac")
    assert out["bitrate"] > 10_000
    assert (out["sha256"], out["size"]) == (sha256(clip), clip.stat().st_size)
    assert out["codecs"].startswith("avc1.") and out["codecs"].endswith(",mp4a.40.2")
    assert out["estimates"]["h264_720"]["cpu"] > 0
    assert out["estimates"]["h264_720"]["inputs"]["duration_s"] == out["duration"]
    assert out["estimate_inputs"]["duration_s"] == out["duration"]


def test_probe_of_a_file_that_is_not_a_video_fails_for_good(
    clips: dict[str, Path], kit: Toolkit
) -> None:
    with pytest.raises(TaskFailure, match="not a video") as caught:
        probe_source(context("media.probe"), {"uri": str(clips["text"])}, kit)
    assert caught.value.retryable is False
    with pytest.raises(TaskFailure, match="has sha256") as bad_sum:
        probe_source(context("media.probe"), {"uri": str(clips["clip"]), "checksum": "0" * 64}, kit)
    assert bad_sum.value.retryable is False


# -- transcode ------------------------------------------------------------------------------
def test_a_720p_rendition_is_720_high_h264_with_rising_progress(
    renditions: dict[str, tuple[JSON, list[float]]],
) -> None:
    out, progress = renditions["720p_h264"]
    path = Path(out["path"])
    assert path.name == "720p_h264.mp4" and path.exists()
    assert ffprobe_video(path) == {"codec_name": "h264", "width": 1280, "height": 720}
    assert (out["height"], out["codec"], out["encoder"]) == (720, "h264", "libx264")
    assert (out["sha256"], out["size"]) == (sha256(path), path.stat().st_size)
    assert out["uri"] == uri_of(path)
    assert not list(path.parent.glob(".*.part*"))  # the temporary name is gone
    assert progress == sorted(set(progress)), progress  # strictly rising
    assert progress[-1] == 100.0
    assert len(progress) >= 2, progress  # at least one heartbeat before the end
    assert out["estimate"]["inputs"]["height"] == 720 and out["degraded"] is None
    cost = out["cost"]  # what the analytics role learns the cost ratio from (ADR 66)
    assert (cost["model"], cost["estimate_of"]) == (MODEL, "worker")  # it declared no estimate
    assert cost["estimated_cpu_seconds"] == out["estimate"]["cpu_seconds"]
    assert cost["measured_cpu_seconds"] > 0 and cost["peak_memory_mb"] > 1
    ratio = cost["measured_cpu_seconds"] / cost["estimated_cpu_seconds"]
    assert cost["ratio"] == pytest.approx(ratio, rel=1e-3)


def test_a_second_attempt_degrades_the_preset_of_an_h265_rendition(
    renditions: dict[str, tuple[JSON, list[float]]],
) -> None:
    out, progress = renditions["360p_h265"]
    assert ffprobe_video(Path(out["path"])) == {"codec_name": "hevc", "width": 640, "height": 360}
    assert (out["encoder"], out["preset"]) == ("libx265", "veryfast")
    assert out["degraded"] == {"from": "medium", "to": "veryfast", "attempt": 2}
    assert out["codecs"].startswith("hvc1.")
    assert progress[-1] == 100.0
    # the ratio is to the estimate it was placed by, which the dispatcher corrects
    assert (out["cost"]["estimate_of"], out["cost"]["estimated_cpu_seconds"]) == ("declared", 5.0)
    assert out["declared"]["inputs"]["cpu_seconds"] == 5.0


def test_cancellation_ends_ffmpegs_whole_process_group(
    clips: dict[str, Path], kit: Toolkit
) -> None:
    ctx = context("media.transcode")
    task = {
        "source": str(clips["long"]),
        "height": 720,
        "codec": "h265",
        "preset": "slow",
        "name": "cancelled",
    }
    caught: list[BaseException] = []

    def run() -> None:
        try:
            transcode(ctx, task, kit)
        except BaseException as exc:  # noqa: BLE001  (handed to the test thread)
            caught.append(exc)

    worker = threading.Thread(target=run)
    worker.start()
    deadline = time.monotonic() + 30
    while not progress_of(ctx) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert progress_of(ctx), "no progress from ffmpeg within 30 s"
    [pid] = ffmpeg_children()
    pgid = os.getpgid(pid)
    assert pgid == pid  # ffmpeg leads its own group
    ctx.cancel_event.set()
    worker.join(kit.settings.kill_grace_s + 10)
    assert not worker.is_alive()
    assert len(caught) == 1 and isinstance(caught[0], TaskCancelled), caught
    with pytest.raises(ProcessLookupError):
        os.killpg(pgid, 0)
    assert ffmpeg_children() == []
    out_dir = kit.settings.resolved_output_dir / "wf-media"
    assert not (out_dir / "cancelled.mp4").exists()
    assert not list(out_dir.glob(".cancelled.part*"))
    assert progress_of(ctx)[-1] < 100.0


def ffmpeg_children() -> list[int]:
    """Our child processes named ffmpeg (zombies included: those have not been reaped)."""
    return children(os.getpid(), "ffmpeg")


def test_nvenc_transcode_on_the_pinned_gpu(clips: dict[str, Path], kit: Toolkit) -> None:
    nvenc = gpu.detect(kit.ffmpeg)
    if not nvenc.available:
        pytest.skip(f"no NVENC on this machine: {nvenc.reason}")
    ctx = context("media.transcode", gpu_index=0, cpu=1, gpu_memory_mb=512)
    task = {"source": str(clips["clip"]), "height": 720, "codec": "h264", "accel": "gpu"}
    out = transcode(ctx, {**task, "name": "720p_nvenc"}, Toolkit.create(kit.settings, nvenc))
    assert (out["encoder"], out["accel"], out["gpu"]) == ("h264_nvenc", "gpu", 0)
    assert ffprobe_video(Path(out["path"]))["height"] == 720


# -- thumbnails, HLS, asset -----------------------------------------------------------------
def test_thumbnail_sprite_and_frames(clips: dict[str, Path], kit: Toolkit) -> None:
    source = {"source": str(clips["clip"])}
    sprite = thumbnail(context("media.thumbnail"), {**source, "count": 4, "width": 160}, kit)
    path = Path(sprite["sprite"]["path"])
    assert path.read_bytes()[:2] == b"\xff\xd8"  # a JPEG
    assert ffprobe_video(path) == {"codec_name": "mjpeg", "width": 320, "height": 180}
    assert (sprite["sprite"]["columns"], sprite["sprite"]["rows"]) == (2, 2)
    assert sprite["sprite"]["sha256"] == sha256(path)
    frames = thumbnail(
        context("media.thumbnail"), {**source, "count": 3, "mode": "frames", "name": "f"}, kit
    )
    assert [Path(f["path"]).name for f in frames["frames"]] == ["f_01.jpg", "f_02.jpg", "f_03.jpg"]
    assert all(ffprobe_video(Path(f["path"]))["width"] == 320 for f in frames["frames"])


@pytest.fixture(scope="module")
def hls(renditions: dict[str, tuple[JSON, list[float]]], kit: Toolkit) -> JSON:
    join_output = {"1080": None, "720": {ref: out for ref, (out, _) in renditions.items()}}
    return package(context("media.package"), {"renditions": join_output, "segment_s": 2}, kit)


def test_hls_master_playlist_lists_every_rendition(hls: JSON) -> None:
    master = Path(hls["path"])
    lines = master.read_text().splitlines()
    assert lines[0] == "#EXTM3U"
    streams = [
        (line, lines[i + 1])
        for i, line in enumerate(lines)
        if line.startswith("#EXT-X-STREAM-INF:")
    ]
    assert [uri for _, uri in streams] == ["720p_h264/index.m3u8", "360p_h265/index.m3u8"]
    assert "RESOLUTION=1280x720" in streams[0][0] and 'CODECS="avc1.' in streams[0][0]
    assert "RESOLUTION=640x360" in streams[1][0] and 'CODECS="hvc1.' in streams[1][0]
    for info, uri in streams:
        attrs = dict(a.split("=", 1) for a in info.split(":", 1)[1].split(",") if "=" in a)
        assert 0 < int(attrs["AVERAGE-BANDWIDTH"]) <= int(attrs["BANDWIDTH"])
        playlist = (master.parent / uri).read_text()
        assert "#EXT-X-ENDLIST" in playlist
        segments = [s for s in playlist.splitlines() if s and not s.startswith("#")]
        durations = [
            float(s[8:].split(",")[0]) for s in playlist.splitlines() if s.startswith("#EXTINF:")
        ]
        assert len(segments) == len(durations) == 2  # 3 s cut at the 2 s keyframes
        assert sum(durations) == pytest.approx(3.0, abs=0.1)
        assert all((master.parent / uri).parent.joinpath(s).stat().st_size > 0 for s in segments)
    # ffmpeg itself reads the package back through the master playlist
    done = subprocess.run(
        [
            "ffprobe",
            "-v",
            "error",
            "-show_entries",
            "stream=codec_name,height",
            "-of",
            "json",
            str(master),
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    )
    heights = {s.get("height") for s in json.loads(done.stdout)["streams"]}
    assert {720, 360} <= heights
    assert not list(master.parent.parent.glob(".hls.part"))


def test_asset_record_lists_every_output_with_matching_checksums(
    clips: dict[str, Path], kit: Toolkit, renditions: dict[str, tuple[JSON, list[float]]], hls: JSON
) -> None:
    probed = probe_source(context("media.probe"), {"uri": str(clips["clip"])}, kit)
    thumbs = thumbnail(context("media.thumbnail"), {"source": str(clips["clip"])}, kit)
    task = {
        "asset_id": "asset-1",
        "source": probed["uri"],
        "probe": probed,
        "renditions": {"720": {k: v for k, (v, _) in renditions.items()}},
        "thumbnails": thumbs,
        "package": hls,
    }
    out = write_asset(context("media.write_asset"), task, kit)
    record_path = Path(out["path"])
    assert out["sha256"] == sha256(record_path)
    record = json.loads(record_path.read_text())
    files = [*record["renditions"], *record["thumbnails"], record["package"]["master"]]
    for v in record["package"]["variants"]:
        files += [v["playlist"], *v["segments"]]
    assert out["outputs"] == record["outputs"] == len(files) > 10
    for f in files:
        path = Path(f["path"])
        assert f["uri"] == uri_of(path)
        assert (f["sha256"], f["size"]) == (sha256(path), path.stat().st_size), path
    assert {(r["height"], r["video_codec"]) for r in record["renditions"]} == {
        (720, "h264"),
        (360, "hevc"),
    }
    assert record["source"]["sha256"] == sha256(clips["clip"])
    assert "estimates" not in record["source"]


def test_asset_refuses_an_output_that_changed(
    kit: Toolkit, renditions: dict[str, tuple[JSON, list[float]]], tmp_path: Path
) -> None:
    out, _ = renditions["360p_h265"]
    copy = tmp_path / "copy.mp4"
    shutil.copy(out["path"], copy)
    with copy.open("ab") as f:
        f.write(b"tampered")
    changed = {**out, "uri": uri_of(copy), "path": str(copy)}
    with pytest.raises(TaskFailure, match="but its task reported") as caught:
        write_asset(context("media.write_asset"), {"asset_id": "a2", "renditions": [changed]}, kit)
    assert caught.value.retryable is False
