"""``es-sched demo``: the main job, end to end, on this machine.

Brings the stack up if needed, generates N short test videos with ffmpeg's synthetic sources
(480p to 1080p, 2 to 10 s) plus one broken file, starts every role (``es-sched run``) and two
media workers (``es-sched worker --media``) as child processes, registers
examples/media_pipeline.json, submits one workflow per video with a callback to a local
receiver that checks each body's signature, shows progress while they run, and ends with a
summary. Each run uses its own topic prefix, schema and folders under ``.state/demo/<run>``, so
it runs again cleanly; ``--keep`` leaves the roles and workers running afterwards.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from es_sched.errors import ConfigError
from es_sched.workers.media.callback import received, verify

LADDER = ((854, 480), (1280, 720), (1920, 1080))
MAX_AGE_S = 300  # the documented receiver's bound (docs/security.md) on a callback's age (ADR 77)


@dataclass
class Video:
    path: Path
    width: int
    height: int
    seconds: int
    broken: bool = False
    sha256: str = ""


def make_videos(
    folder: Path, count: int, seed: int = 7, seconds: tuple[int, int] = (2, 10)
) -> list[Video]:
    """``count`` valid videos (lavfi testsrc2 + a sine tone, H.264/AAC) and one broken file."""
    ffmpeg = shutil.which("ffmpeg")
    if ffmpeg is None:
        raise ConfigError("ffmpeg is missing: run `es-sched stack up` (it installs it)")
    folder.mkdir(parents=True, exist_ok=True)
    rng, videos = random.Random(seed), []  # noqa: S311  (test clip lengths, not secrets)
    for i in range(count):
        width, height = LADDER[i % len(LADDER)]
        length = rng.randint(*seconds)
        path = folder / f"video-{i:02d}-{height}p-{length}s.mp4"
        if not path.exists():
            subprocess.run(
                [
                    ffmpeg,
                    "-hide_banner",
                    "-loglevel",
                    "error",
                    "-y",
                    "-f",
                    "lavfi",
                    "-i",
                    f"testsrc2=size={width}x{height}:rate=25:duration={length}",
                    "-f",
                    "lavfi",
                    "-i",
                    f"sine=frequency={220 + 40 * i}:duration={length}",
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
                capture_output=True,
                timeout=300,
            )
        videos.append(Video(path, width, height, length))
    broken = folder / "broken.mp4"
    broken.write_bytes(b"this is not a video, whatever its name says\n" * 64)
    videos.append(Video(broken, 0, 0, 0, broken=True))
    for v in videos:
        v.sha256 = hashlib.sha256(v.path.read_bytes()).hexdigest()
    return videos


@dataclass
class Callbacks:
    """A local receiver of the workflows' callbacks; it checks each body's signature."""

    secret: bytes
    received: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> str:
        callbacks = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                got = received(self.headers)
                signed = verify(body, callbacks.secret.decode(), got, time.time(), MAX_AGE_S)
                try:
                    doc = json.loads(body)
                except ValueError:
                    doc = {"unreadable": body[:200].decode(errors="replace")}
                with callbacks.lock:
                    callbacks.received.append(
                        {"at": time.time(), "signed": signed, "path": self.path, "body": doc}
                    )
                self.send_response(200 if signed else 401)
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def stop(self) -> None:
        self.server.shutdown()

    def by_path(self) -> dict[str, dict[str, Any]]:
        with self.lock:
            return {c["path"]: c for c in self.received}


@dataclass
class Processes:
    """The child processes of one demo run, each logging to a file."""

    env: dict[str, str]
    logs: Path
    children: list[tuple[str, subprocess.Popen[bytes]]] = field(default_factory=list)

    def start(self, name: str, *args: str) -> None:
        log = (self.logs / f"{name}.log").open("wb")
        proc = subprocess.Popen(
            [sys.executable, "-m", "es_sched", *args],
            env={**os.environ, **self.env},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        self.children.append((name, proc))

    def wait_log(self, name: str, text: str, timeout_s: float = 120) -> None:
        deadline = time.monotonic() + timeout_s
        path = self.logs / f"{name}.log"
        while text not in path.read_text(errors="replace"):
            for n, proc in self.children:
                if n == name and proc.poll() is not None:
                    raise ConfigError(f"{name} exited {proc.returncode}; see {path}")
            if time.monotonic() > deadline:
                raise ConfigError(f"{name} did not say {text!r} in {timeout_s:g}s; see {path}")
            time.sleep(0.2)

    def stop(self) -> None:
        for _, proc in self.children:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for name, proc in self.children:
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
                print(f"{name} did not stop in 60 s and was killed", file=sys.stderr)


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def probe_ok(rendition: dict[str, Any]) -> bool:
    """ffprobe confirms a rendition file: it exists, with the height and codec it claims."""
    ffprobe = shutil.which("ffprobe")
    path = Path(str(rendition.get("path") or unquote(str(rendition.get("uri", ""))[7:])))
    if ffprobe is None or not path.exists():
        return False
    probe = subprocess.run(
        [
            ffprobe,
            "-v",
            "error",
            "-select_streams",
            "v:0",
            "-show_entries",
            "stream=height,codec_name",
            "-of",
            "json",
            str(path),
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    streams = json.loads(probe.stdout or "{}").get("streams") or [{}]
    codec = {"h264": "h264", "h265": "hevc", "hevc": "hevc"}.get(str(rendition.get("codec")))
    return bool(
        streams[0].get("height") == rendition.get("height")
        and codec is not None
        and streams[0].get("codec_name") == codec
    )
