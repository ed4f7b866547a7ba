"""Pure parts of packaging and probing: master playlist text, finding renditions in JOIN
outputs, segment bandwidths, ffprobe JSON -> properties, HLS codec names, file references."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from es_sched.workers.media.files import (
    normalise_checksum,
    open_ref,
    part_path,
    path_of,
    sha256_of,
    uri_of,
)
from es_sched.workers.media.package import (
    attributes,
    bandwidths,
    find_renditions,
    master_playlist,
    playlist_files,
)
from es_sched.workers.media.probe import hls_codecs, parse_probe
from es_sched.workers.sdk import TaskFailure


def rendition(name: str, height: int, **extra: Any) -> dict[str, Any]:
    return {
        "kind": "rendition",
        "name": name,
        "uri": f"file:///o/{name}.mp4",
        "sha256": "0" * 64,
        "height": height,
        "width": height * 16 // 9,
        **extra,
    }


def test_master_playlist_lists_every_variant_with_its_attributes() -> None:
    variants = [
        {
            "uri": "720p/index.m3u8",
            "bandwidth": 2_500_000,
            "average_bandwidth": 2_000_000,
            "width": 1280,
            "height": 720,
            "codecs": "avc1.64001f,mp4a.40.2",
            "fps": 30,
        },
        {"uri": "480p/index.m3u8", "bandwidth": 900_000, "width": 854, "height": 480},
    ]
    text = master_playlist(variants)
    assert text == (
        "#EXTM3U\n#EXT-X-VERSION:3\n#EXT-X-INDEPENDENT-SEGMENTS\n"
        "#EXT-X-STREAM-INF:BANDWIDTH=2500000,AVERAGE-BANDWIDTH=2000000,RESOLUTION=1280x720,"
        'CODECS="avc1.64001f,mp4a.40.2",FRAME-RATE=30.000\n720p/index.m3u8\n'
        "#EXT-X-STREAM-INF:BANDWIDTH=900000,RESOLUTION=854x480\n480p/index.m3u8\n"
    )
    fmp4 = master_playlist([{"uri": "a", "bandwidth": 1, "width": 2, "height": 2, "fmp4": True}])
    assert "#EXT-X-VERSION:7" in fmp4  # fMP4 segments need version 7


def test_attributes_keep_quoted_commas_together() -> None:
    assert attributes('BANDWIDTH=1,CODECS="avc1.64001f,mp4a.40.2",RESOLUTION=2x2') == [
        ("BANDWIDTH", "1"),
        ("CODECS", '"avc1.64001f,mp4a.40.2"'),
        ("RESOLUTION", "2x2"),
    ]


def test_renditions_are_found_in_switch_cases_of_join_outputs() -> None:
    value = {
        "1080": {
            "transcode_1080p": rendition("1080p", 1080),
            "transcode_720p": rendition("720p", 720),
        },
        "720": None,  # a case the SWITCH did not take
        "480": [rendition("480p", 480), rendition("720p", 720)],  # the same file twice
        "noise": {"uri": "file:///x", "size": 3},
    }
    assert [r["name"] for r in find_renditions(value)] == ["1080p", "720p", "480p"]
    assert find_renditions(None) == []


def test_playlist_files_and_bandwidths(tmp_path: Path) -> None:
    (tmp_path / "init.mp4").write_bytes(b"i" * 100)
    (tmp_path / "seg_0000.m4s").write_bytes(b"a" * 1000)
    (tmp_path / "seg_0001.m4s").write_bytes(b"b" * 3000)
    playlist = tmp_path / "index.m3u8"
    playlist.write_text(
        '#EXTM3U\n#EXT-X-TARGETDURATION:2\n#EXT-X-MAP:URI="init.mp4"\n'
        "#EXTINF:2.000000,\nseg_0000.m4s\n#EXTINF:1.000000,\nseg_0001.m4s\n#EXT-X-ENDLIST\n"
    )
    files = playlist_files(playlist)
    assert files == [
        (tmp_path / "init.mp4", None),
        (tmp_path / "seg_0000.m4s", 2.0),
        (tmp_path / "seg_0001.m4s", 1.0),
    ]
    peak, average = bandwidths(files)
    assert peak == 24_000  # 3000 bytes in 1 s
    assert average == (1000 + 3000) * 8 // 3  # the init section is loaded once: not counted


FFPROBE: dict[str, Any] = {
    "streams": [
        {
            "codec_type": "video",
            "codec_name": "h264",
            "profile": "High",
            "level": 31,
            "width": 1280,
            "height": 720,
            "avg_frame_rate": "30000/1001",
            "pix_fmt": "yuv420p",
        },
        {
            "codec_type": "audio",
            "codec_name": "aac",
            "profile": "LC",
            "channels": 2,
            "sample_rate": "48000",
        },
        {"codec_type": "video", "codec_name": "mjpeg", "disposition": {"attached_pic": 1}},
    ],
    "format": {
        "format_name": "mov,mp4,m4a,3gp,3g2,mj2",
        "duration": "12.345678",
        "bit_rate": "2500000",
    },
}


def test_parse_probe_reads_the_video_and_audio() -> None:
    p = parse_probe(FFPROBE)
    assert (p["duration"], p["width"], p["height"], p["fps"]) == (12.346, 1280, 720, 29.97)
    assert (p["video_codec"], p["audio_codec"], p["bitrate"]) == ("h264", "aac", 2_500_000)
    assert p["codecs"] == "avc1.64001f,mp4a.40.2"
    assert (p["audio_channels"], p["audio_sample_rate"], p["rotation"]) == (2, 48000, 0)


def test_a_rotated_phone_video_reports_what_players_show() -> None:
    doc = {
        "streams": [{**FFPROBE["streams"][0], "side_data_list": [{"rotation": -90}]}],
        "format": FFPROBE["format"],
    }
    p = parse_probe(doc)
    assert (p["width"], p["height"], p["rotation"]) == (720, 1280, -90)


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"streams": [FFPROBE["streams"][1]], "format": {"duration": "3"}}, "no video stream"),
        ({"streams": [FFPROBE["streams"][2]], "format": {"duration": "3"}}, "no video stream"),
        ({"streams": [FFPROBE["streams"][0]], "format": {}}, "no duration"),
    ],
)
def test_what_is_not_a_video_fails_for_good(doc: dict[str, Any], message: str) -> None:
    with pytest.raises(TaskFailure, match=message) as caught:
        parse_probe(doc, "x.bin")
    assert caught.value.retryable is False


@pytest.mark.parametrize(
    ("stream", "codecs"),
    [
        ({"codec_name": "h264", "profile": "Main", "level": 30}, "avc1.4d401e"),
        ({"codec_name": "h264", "profile": "Constrained Baseline", "level": 21}, "avc1.424015"),
        ({"codec_name": "hevc", "profile": "Main", "level": 93}, "hvc1.1.6.L93.B0"),
        ({"codec_name": "hevc", "profile": "Main 10", "level": 120}, "hvc1.2.4.L120.B0"),
        ({"codec_name": "aac", "profile": "HE-AAC"}, "mp4a.40.5"),
        ({"codec_name": "vp9", "profile": "0", "level": 30}, None),
    ],
)
def test_hls_codec_names(stream: dict[str, Any], codecs: str | None) -> None:
    assert hls_codecs(stream) == codecs


def test_references_are_file_uris_or_paths(tmp_path: Path) -> None:
    f = tmp_path / "a b.mp4"
    f.write_bytes(b"data")
    assert uri_of(f) == f"file://{tmp_path}/a%20b.mp4"
    assert path_of(uri_of(f)) == f
    assert path_of({"uri": uri_of(f)}) == f
    assert path_of(str(f)) == f
    assert part_path(tmp_path / "720p.mp4") == tmp_path / ".720p.part.mp4"
    for bad in ("s3://bucket/key.mp4", "file://otherhost/x.mp4", "", None, 7):
        with pytest.raises(TaskFailure) as caught:
            path_of(bad)
        assert caught.value.retryable is False


def test_open_ref_verifies_the_checksum(tmp_path: Path) -> None:
    f = tmp_path / "x.mp4"
    f.write_bytes(b"data")
    digest = sha256_of(f)
    assert open_ref(uri_of(f), f"sha256:{digest.upper()}") == f
    assert open_ref({"uri": uri_of(f), "sha256": digest}) == f
    assert normalise_checksum(None) is None
    with pytest.raises(TaskFailure, match="not the") as caught:
        open_ref(uri_of(f), "0" * 64)
    assert caught.value.retryable is False
    with pytest.raises(TaskFailure, match="not a sha256"):
        open_ref(uri_of(f), "md5:abc")
    with pytest.raises(TaskFailure, match="does not exist"):
        open_ref(str(tmp_path / "missing.mp4"))
