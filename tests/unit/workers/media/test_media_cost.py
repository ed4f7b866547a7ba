"""The transcode cost estimator: duration x pixels x codec cost -> declared resources."""

from __future__ import annotations

import pytest

from es_sched.workers.media.cost import (
    CPU_SECONDS_PER_GIGAPIXEL,
    MODEL,
    STANDARD_HEIGHTS,
    estimate,
    estimate_grid,
    scaled_width,
)


def test_scaled_width_keeps_the_aspect_and_is_even() -> None:
    assert scaled_width(1920, 1080, 720) == 1280
    assert scaled_width(640, 360, 480) == 854  # 853.3 -> the nearest even number
    assert scaled_width(1080, 1920, 720) == 406  # portrait
    assert scaled_width(0, 0, 720) == 1280  # unknown source: assume 16:9


def test_work_is_duration_times_pixels_times_codec_cost() -> None:
    e = estimate(10.0, 1920, 1080, 720, "h264", fps=30.0)
    gigapixels = 1280 * 720 * 30 * 10 / 1e9
    assert e.cpu_seconds == pytest.approx(gigapixels * CPU_SECONDS_PER_GIGAPIXEL, rel=1e-3)
    longer = estimate(20.0, 1920, 1080, 720, "h264", fps=30.0)
    assert longer.cpu_seconds == pytest.approx(2 * e.cpu_seconds, rel=1e-3)
    hevc = estimate(10.0, 1920, 1080, 720, "h265", fps=30.0)
    assert hevc.cpu_seconds == pytest.approx(4 * e.cpu_seconds, rel=1e-3)
    slow = estimate(10.0, 1920, 1080, 720, "h264", preset="slow", fps=30.0)
    assert (
        slow.cpu_seconds
        > e.cpu_seconds
        > estimate(10.0, 1920, 1080, 720, "h264", "veryfast").cpu_seconds
    )


def test_cpu_grows_with_work_within_half_a_core_and_max_cpu() -> None:
    short = estimate(2.0, 640, 360, 360, "h264")
    assert short.resources["cpu"] == 0.5  # a couple of seconds need no more
    long_1080 = estimate(3600.0, 1920, 1080, 1080, "h265", max_cpu=2.0)
    assert long_1080.resources["cpu"] == 2.0  # capped: no worker offers more
    roomy = estimate(3600.0, 1920, 1080, 1080, "h265", max_cpu=16.0)
    assert roomy.resources["cpu"] == 8.0  # an encoder at 1080p gains little past 8
    small_frames = estimate(3600.0, 640, 360, 360, "h265", max_cpu=16.0)
    assert small_frames.resources["cpu"] == 2.0
    assert long_1080.expected_s == pytest.approx(long_1080.cpu_seconds / 2.0, rel=1e-3)


def test_memory_grows_with_frame_size_and_codec() -> None:
    m = {
        (h, c): estimate(60.0, 1920, 1080, h, c).resources["memory_mb"]
        for h in (480, 1080)
        for c in ("h264", "h265")
    }
    assert m[480, "h264"] < m[1080, "h264"] < m[1080, "h265"]
    assert m[480, "h264"] < m[480, "h265"]
    assert all(v % 64 == 0 for v in m.values())


def test_the_gpu_path_declares_gpu_memory_and_little_cpu() -> None:
    e = estimate(600.0, 1920, 1080, 1080, "h264", accel="gpu")
    assert e.resources["gpu_memory_mb"] >= 256
    assert e.resources["cpu"] <= 1.0
    assert "gpu_memory_mb" not in estimate(600.0, 1920, 1080, 1080, "h264").resources
    assert e.cpu_seconds < estimate(600.0, 1920, 1080, 1080, "h264").cpu_seconds


def test_the_inputs_are_recorded_for_refinement() -> None:
    e = estimate(12.5, 1920, 1080, 720, "h265", preset="fast", fps=25.0, max_cpu=4.0)
    assert e.inputs == {
        "model": MODEL,
        "duration_s": 12.5,
        "src_width": 1920,
        "src_height": 1080,
        "width": 1280,
        "height": 720,
        "fps": 25.0,
        "codec": "h265",
        "codec_cost": 4.0,
        "preset": "fast",
        "preset_factor": 0.8,
        "accel": "cpu",
        "max_cpu": 4.0,
        "gigapixels": round(1280 * 720 * 25 * 12.5 / 1e9, 6),
    }
    assert e.as_dict()["inputs"] == e.inputs


def test_unknown_codec_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown codec 'av1'"):
        estimate(1.0, 640, 360, 360, "av1")


def test_the_grid_has_every_codec_height_and_path() -> None:
    g = estimate_grid(30.0, 1920, 1080, 30.0, max_cpu=2.0)
    keys = set(g["estimates"])
    assert keys == {
        f"{c}_{h}{s}" for c in ("h264", "h265") for h in STANDARD_HEIGHTS for s in ("", "_gpu")
    }
    one = estimate(30.0, 1920, 1080, 720, "h264", fps=30.0)
    assert g["estimates"]["h264_720"] == {**one.resources, "inputs": one.declared_inputs()}
    assert g["estimates"]["h264_720"]["inputs"]["cpu_seconds"] == one.cpu_seconds
    assert g["estimates"]["h264_720_gpu"]["inputs"]["accel"] == "gpu"
    assert g["estimate_inputs"]["model"] == MODEL
    assert g["estimate_inputs"]["duration_s"] == 30.0
