"""Running ffmpeg and ffprobe: where they are, and how a long ffmpeg ends when a task does.

``tool(name)`` finds a binary on ``PATH`` or raises ``ConfigError`` (``es-sched stack up``
installs them). ``run_ffmpeg`` starts ffmpeg in a new session, so ffmpeg and anything it
spawns form one process group whose id is ffmpeg's pid. It feeds each line of ffmpeg's stdout
(the ``-progress pipe:1`` stream) to ``on_line`` and keeps the last lines of stderr for the
failure message. When ``cancel`` is set (the dispatcher cancelled or preempted the task, or
the worker is shutting down) the whole group gets SIGTERM, then SIGKILL after ``grace_s``,
and ``TaskCancelled`` is raised; a non-zero exit is a retryable ``TaskFailure``. A run that
ends well returns its ``Usage``: ffmpeg's own cpu-seconds and peak memory, from the kernel's
accounting of that one process (``wait4``), not the worker's, whose other tasks' encoders run
beside it; it is what the learned cost is learned from (ADR 66).
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import resource
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import IO

from es_sched.errors import ConfigError
from es_sched.workers.sdk import HostFault, TaskCancelled, TaskFailure

log = logging.getLogger(__name__)
POLL_S = 0.05


@dataclass(frozen=True)
class Usage:
    """What one ffmpeg run used, by the kernel's accounting of it and its reaped children."""

    cpu_s: float  # user + system cpu-seconds
    peak_memory_mb: float  # peak resident set size (ru_maxrss)
    wall_s: float

    def as_dict(self) -> dict[str, float]:
        return {
            "cpu_s": round(self.cpu_s, 3),
            "peak_memory_mb": round(self.peak_memory_mb, 1),
            "wall_s": round(self.wall_s, 3),
        }


def tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise ConfigError(
            f"{name} is not on PATH: the media handlers need ffmpeg and ffprobe "
            "(`es-sched stack up` installs them, or `apt-get install -y ffmpeg`)"
        )
    return found


def _pump(stream: IO[str], sink: Callable[[str], None]) -> None:
    for line in stream:
        sink(line.rstrip("\n"))


def _exited(pid: int) -> bool:
    """Whether the child exited, without reaping it: while it is a zombie its pid, and so the
    group id, cannot be reused, so signalling the group can only reach ffmpeg's processes."""
    return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None


def kill_group(proc: subprocess.Popen[str], grace_s: float) -> None:
    """SIGTERM to ffmpeg's group, SIGKILL to it after ``grace_s``; then reap ffmpeg."""
    pgid = proc.pid
    if not _exited(pgid):
        os.killpg(pgid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while not _exited(pgid) and time.monotonic() < deadline:
            time.sleep(POLL_S)
        if not _exited(pgid):
            log.warning("ffmpeg group %d ignored SIGTERM for %.1fs: SIGKILL", pgid, grace_s)
    _end_group(proc)


def _end_group(proc: subprocess.Popen[str]) -> resource.struct_rusage | None:
    """Kill what is left of the group, reap ffmpeg; its resource usage (None: reaped before)."""
    with contextlib.suppress(ProcessLookupError):  # ffmpeg's children may outlive it
        os.killpg(proc.pid, signal.SIGKILL)
    if proc.returncode is not None:
        return None
    try:
        _, status, usage = os.wait4(proc.pid, 0)
    except ChildProcessError:  # reaped already: Popen knows its status
        proc.wait()
        return None
    proc.returncode = os.waitstatus_to_exitcode(status)
    return usage


def run_ffmpeg(
    argv: Sequence[str],
    cancel: threading.Event,
    on_line: Callable[[str], None] | None = None,
    env: Mapping[str, str] | None = None,
    grace_s: float = 5.0,
    on_start: Callable[[int], None] | None = None,
) -> Usage:
    """Run ``argv`` to completion; see the module docstring for cancellation and failures."""
    started = time.monotonic()
    try:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            errors="replace",
            start_new_session=True,
            env=dict(env) if env is not None else None,
        )
    except OSError as exc:  # the tool is missing or broken on this host (ADR 58)
        raise HostFault(f"could not start {argv[0]}: {exc}") from exc
    pgid = proc.pid  # start_new_session: ffmpeg leads its own group
    if on_start is not None:
        on_start(pgid)
    stderr: collections.deque[str] = collections.deque(maxlen=40)
    assert proc.stdout is not None and proc.stderr is not None
    readers = [
        threading.Thread(target=_pump, args=(proc.stdout, on_line or (lambda _l: None))),
        threading.Thread(target=_pump, args=(proc.stderr, stderr.append)),
    ]
    for r in readers:
        r.daemon = True
        r.start()
    try:
        while not _exited(pgid):
            if cancel.wait(POLL_S):
                kill_group(proc, grace_s)
                raise TaskCancelled(f"{os.path.basename(argv[0])} stopped: task cancelled")
        usage = _end_group(proc)
    except BaseException:
        if proc.returncode is None:  # an error in on_line or an interrupt: leave nothing
            kill_group(proc, grace_s)
        raise
    finally:
        for r in readers:
            r.join(5)
        proc.stdout.close()
        proc.stderr.close()
    if proc.returncode != 0:
        tail = "\n".join(stderr).strip()[-1500:]
        raise TaskFailure(f"{os.path.basename(argv[0])} exited {proc.returncode}: {tail}")
    wall_s = time.monotonic() - started
    if usage is None:
        return Usage(0.0, 0.0, wall_s)
    return Usage(usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, wall_s)


def run_quick(argv: Sequence[str], timeout_s: float = 120.0) -> subprocess.CompletedProcess[str]:
    """A short command (ffprobe, ``ffmpeg -encoders``); a timeout is a retryable failure."""
    started = time.monotonic()
    try:
        return subprocess.run(
            list(argv),
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout_s,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired as exc:
        took = time.monotonic() - started
        raise TaskFailure(f"{os.path.basename(argv[0])} timed out after {took:.0f}s") from exc
    except OSError as exc:  # the tool is missing or broken on this host (ADR 58)
        raise HostFault(f"could not run {argv[0]}: {exc}") from exc
