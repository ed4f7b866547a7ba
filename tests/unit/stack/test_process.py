"""PID ownership: stop only what we started, and never a recycled PID."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from es_sched.errors import StackError
from es_sched.stack import process


def _sleeper(marker: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-c", "import time, sys; time.sleep(60)", marker],
        start_new_session=True,
    )


def test_owned_process_is_found_and_stopped(tmp_path: Path) -> None:
    marker = f"marker-{tmp_path.name}"
    pid = process.spawn(
        [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(60)", marker],
        tmp_path / "logs" / "svc.log",
    )
    owned = process.OwnedProcess(tmp_path / "pids" / "svc.pid", marker)
    owned.record(pid)
    deadline = time.monotonic() + 10  # until exec() has replaced the forked parent's cmdline
    while "up" not in process.tail(tmp_path / "logs" / "svc.log") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert owned.pid() == pid
    assert process.tree_memory_mb(pid) > 0
    assert owned.stop(timeout_s=10) == pid
    assert owned.pid() is None
    assert not owned.pid_file.exists()
    assert not process.cmdline_contains(pid, marker)


def test_a_recycled_pid_is_not_ours_and_is_left_alone(tmp_path: Path) -> None:
    stranger = _sleeper("somebody-else")
    try:
        owned = process.OwnedProcess(tmp_path / "svc.pid", marker=str(tmp_path))
        owned.record(stranger.pid)  # the PID file points at a process that is not ours
        assert owned.pid() is None
        assert owned.stop(timeout_s=1) is None
        assert stranger.poll() is None  # still running: we did not signal it
    finally:
        stranger.kill()
        stranger.wait()


def test_a_process_ignoring_sigterm_is_killed_after_the_timeout(tmp_path: Path) -> None:
    marker = f"stubborn-{tmp_path.name}"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "print('ready', flush=True); time.sleep(60)",
            marker,
        ],
        stdout=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
    owned = process.OwnedProcess(tmp_path / "svc.pid", marker)
    owned.record(proc.pid)
    assert owned.stop(timeout_s=1) == proc.pid
    # It ignores SIGTERM, so only the SIGKILL after the timeout can have ended it (stop() also
    # reaped it, being its parent here, so the exit status is gone).
    assert not Path(f"/proc/{proc.pid}").exists()


def test_run_reports_the_failing_commands_output() -> None:
    try:
        process.run([sys.executable, "-c", "import sys; sys.exit('boom: bad input')"], "probe")
    except StackError as exc:
        assert "probe failed (exit 1)" in str(exc)
        assert "boom: bad input" in str(exc)
    else:
        raise AssertionError("a failing command must raise StackError")


def test_tail_of_a_missing_log_says_so(tmp_path: Path) -> None:
    assert process.tail(tmp_path / "nope.log") == "(no log written)"
    log = tmp_path / "x.log"
    log.write_text("".join(f"line {i}\n" for i in range(100)))
    assert process.tail(log, 2) == "line 98\nline 99"
