"""The transcode command builder and ffmpeg's -progress parser (pure, no ffmpeg needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from es_sched.workers.media.command import (
    ProgressParser,
    Rendition,
    degraded_preset,
    encoder_for,
    transcode_command,
)

SRC, OUT = Path("/in/src.mov"), Path("/out/.720p.part.mp4")


def after(argv: list[str], flag: str) -> str:
    assert flag in argv, f"{flag} missing from {argv}"
    return argv[argv.index(flag) + 1]


def test_h264_on_the_cpu_with_crf_and_preset() -> None:
    argv = transcode_command(
        "ffmpeg", SRC, OUT, Rendition(720, "h264", crf=23, preset="fast"), threads=2
    )
    assert argv[0] == "ffmpeg"
    assert after(argv, "-i") == str(SRC)
    assert after(argv, "-vf") == "scale=-2:720"  # even width, aspect kept
    assert after(argv, "-c:v") == "libx264"
    assert (after(argv, "-preset"), after(argv, "-crf"), after(argv, "-threads")) == (
        "fast",
        "23",
        "2",
    )
    assert "-b:v" not in argv
    assert after(argv, "-progress") == "pipe:1"
    assert "-nostats" in argv
    assert argv[-1] == str(OUT)  # the temporary name; the caller renames it into place
    assert after(argv, "-f") == "mp4"  # the .part name must not decide the format
    assert after(argv, "-force_key_frames") == "expr:gte(t,n_forced*2)"


def test_h265_on_the_cpu_is_tagged_hvc1_and_keeps_its_thread_pool_to_our_share() -> None:
    argv = transcode_command("ffmpeg", SRC, OUT, Rendition(1080, "h265", crf=28), threads=3)
    assert after(argv, "-c:v") == "libx265"
    assert after(argv, "-tag:v") == "hvc1"
    assert after(argv, "-x265-params") == "log-level=error:pools=3"
    assert after(argv, "-crf") == "28"
    assert after(argv, "-vf") == "scale=-2:1080"


@pytest.mark.parametrize(("codec", "encoder"), [("h264", "h264_nvenc"), ("h265", "hevc_nvenc")])
def test_nvenc_on_the_pinned_device(codec: str, encoder: str) -> None:
    r = Rendition(720, codec, crf=24, preset="medium")  # type: ignore[arg-type]
    argv = transcode_command("ffmpeg", SRC, OUT, r, gpu=True)
    assert after(argv, "-c:v") == encoder
    assert after(argv, "-gpu") == "0"  # CUDA_VISIBLE_DEVICES leaves only the pinned device
    assert after(argv, "-preset") == "p4"
    assert (after(argv, "-cq"), after(argv, "-b:v")) == ("24", "0")
    assert "-crf" not in argv and "-x265-params" not in argv
    assert encoder_for(codec, gpu=True) == encoder  # type: ignore[arg-type]


def test_bitrate_mode_sets_rate_control_instead_of_crf() -> None:
    argv = transcode_command("ffmpeg", SRC, OUT, Rendition(480, bitrate_kbps=1200, crf=None))
    assert (after(argv, "-b:v"), after(argv, "-maxrate"), after(argv, "-bufsize")) == (
        "1200k",
        "1800k",
        "2400k",
    )
    assert "-crf" not in argv


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"height": 720, "codec": "vp9"}, "codec must be one of"),
        ({"height": 721}, "even number"),
        ({"height": 720, "preset": "turbo"}, "preset must be one of"),
        ({"height": 720, "crf": None}, "give crf"),
        ({"height": 720, "crf": 60}, "give crf"),
        ({"height": 720, "bitrate_kbps": 0}, "bitrate_kbps must be positive"),
    ],
)
def test_bad_renditions_are_refused(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Rendition(**kwargs)  # type: ignore[arg-type]


def test_degraded_presets_are_faster() -> None:
    assert degraded_preset("medium") == "veryfast"
    assert degraded_preset("veryslow") == "veryfast"
    assert degraded_preset("veryfast") == "ultrafast"
    assert degraded_preset("ultrafast") == "ultrafast"


def test_progress_blocks_become_percent_of_the_duration() -> None:
    p = ProgressParser(duration_s=4.0)
    lines = [
        "frame=0",
        "out_time_us=N/A",
        "speed=N/A",
        "progress=continue",
        "frame=30",
        "out_time_us=1000000",
        "speed=2.5x",
        "progress=continue",
        "out_time_us=3000000",
        "progress=continue",
        "out_time_us=4100000",
        "progress=continue",  # muxing overshoots a little
        "out_time_us=4100000",
        "progress=end",
    ]
    got = [v for v in (p.feed(line) for line in lines) if v is not None]
    assert got == [25.0, 75.0, 100.0, 100.0]
    assert p.speed == "2.5x"


def test_progress_falls_back_to_out_time_ms_and_ignores_noise() -> None:
    p = ProgressParser(duration_s=10.0)
    assert p.feed("garbage without equals") is None
    assert p.feed("out_time_ms=5000000") is None  # ffmpeg's out_time_ms is in microseconds
    assert p.feed("progress=continue") == 50.0
    assert ProgressParser(duration_s=0).feed("progress=continue") is None
