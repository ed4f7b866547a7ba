"""What every media handler shares: settings, the binaries, NVENC support, reading inputs.

``Toolkit.create(settings)`` looks ffmpeg and ffprobe up once (``ConfigError`` when absent)
and detects NVENC once. Input helpers turn a malformed task input into a non-retryable
``TaskFailure`` that names the field: the same input would fail every attempt.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from es_sched.settings import MediaSettings
from es_sched.workers.media import gpu
from es_sched.workers.media.files import host_fault_of, path_of, safe_name
from es_sched.workers.media.proc import tool
from es_sched.workers.sdk import HostFault, TaskContext, TaskFailure

JSON = dict[str, Any]


@dataclass(frozen=True)
class Toolkit:
    settings: MediaSettings
    ffmpeg: str
    ffprobe: str
    nvenc: gpu.Nvenc

    @classmethod
    def create(cls, settings: MediaSettings, nvenc: gpu.Nvenc | None = None) -> Toolkit:
        ffmpeg, ffprobe = tool("ffmpeg"), tool("ffprobe")
        return cls(settings, ffmpeg, ffprobe, nvenc or gpu.detect(ffmpeg))

    def out_dir(self, ctx: TaskContext, task: JSON) -> Path:
        """The task's ``output_dir`` input, else ``<ES_SCHED_MEDIA_OUTPUT_DIR>/<workflow id>``."""
        given = task.get("output_dir")
        if given:
            folder = path_of(given, "output_dir")
        else:
            folder = self.settings.resolved_output_dir / safe_name(ctx.workflow_id)
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            # This worker's configured folder failing is the host's fault; a folder the task
            # named only when its volume is full, read-only or failing (ADR 58).
            fault = host_fault_of(exc, f"output_dir {folder}")
            if given and fault is None:
                raise
            raise fault or HostFault(f"output folder {folder}: {exc}") from exc
        return folder


def number(task: JSON, key: str, default: float | None = None) -> float:
    value = task.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TaskFailure(f"input {key!r} must be a number, got {value!r}", retryable=False)
    return float(value)


def integer(task: JSON, key: str, default: int | None = None) -> int:
    value = task.get(key, default)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise TaskFailure(f"input {key!r} must be an integer, got {value!r}", retryable=False)
    return value


def text(task: JSON, key: str, default: str | None = None) -> str:
    value = task.get(key, default)
    if not isinstance(value, str) or not value:
        raise TaskFailure(f"input {key!r} must be a non-empty string, got {value!r}", False)
    return value


class Throttle:
    """Forwards progress that moved at least ``min_step`` percent and ``min_interval_s``
    since the last report (100 always), never going backwards."""

    def __init__(
        self,
        send: Callable[[float, str], None],
        min_interval_s: float = 0.5,
        min_step: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.send, self.min_interval_s, self.min_step, self.clock = (
            send,
            min_interval_s,
            min_step,
            clock,
        )
        self.last = -1.0
        self.last_at = -float("inf")
        self.sent: list[float] = []

    def __call__(self, percent: float, message: str = "") -> None:
        percent = round(min(100.0, max(0.0, percent)), 1)
        if percent <= self.last:
            return
        now = self.clock()
        due = percent - self.last >= self.min_step and now - self.last_at >= self.min_interval_s
        if percent >= 100.0 or due:
            self.last, self.last_at = percent, now
            self.sent.append(percent)
            self.send(percent, message)
