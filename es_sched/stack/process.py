"""Detached service processes owned through PID files.

A service started by ``es-sched stack`` runs in its own session, writes its output to a log file
under the state folder, and is remembered by a PID file. Ownership is checked against
``/proc/<pid>/cmdline`` (which must contain a marker unique to this state folder), so a recycled
PID is never mistaken for ours and ``stop`` never signals a process it did not start.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from es_sched.errors import StackError


@dataclass(frozen=True)
class OwnedProcess:
    """A process recorded in ``pid_file`` whose command line must contain ``marker``."""

    pid_file: Path
    marker: str

    def pid(self) -> int | None:
        """The recorded PID if that process is alive and still ours, else None."""
        try:
            pid = int(self.pid_file.read_text().strip())
        except (FileNotFoundError, ValueError):
            return None
        return pid if cmdline_contains(pid, self.marker) else None

    def record(self, pid: int) -> None:
        self.pid_file.parent.mkdir(parents=True, exist_ok=True)
        self.pid_file.write_text(f"{pid}\n")

    def forget(self) -> None:
        self.pid_file.unlink(missing_ok=True)

    def stop(self, sig: signal.Signals = signal.SIGTERM, timeout_s: float = 60.0) -> int | None:
        """Signal the owned process, wait for it to exit (SIGKILL after ``timeout_s``).

        Returns the PID that was stopped, or None when nothing of ours was running.
        """
        pid = self.pid()
        if pid is None:
            self.forget()
            return None
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            self.forget()
            return pid
        if not wait_exit(pid, timeout_s):
            os.kill(pid, signal.SIGKILL)
            wait_exit(pid, 10.0)
        self.forget()
        return pid


def cmdline_contains(pid: int, marker: str) -> bool:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, PermissionError, IndexError):
        return False
    if state == "Z":  # a zombie has exited; it only waits for its parent to reap it
        return False
    return marker in raw.replace(b"\0", b" ").decode(errors="replace")


def wait_exit(pid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            reaped, _ = os.waitpid(pid, os.WNOHANG)  # reap it if it is our own child
            if reaped == pid:
                return True
        except ChildProcessError:
            pass
        if not Path(f"/proc/{pid}").exists() or not cmdline_contains(pid, ""):
            # It may have died between the waitpid above and this look: then it is a zombie
            # child of ours, and only a second waitpid removes it.
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
            return True
        time.sleep(0.2)
    return False


def spawn(
    argv: Sequence[str],
    log_file: Path,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> int:
    """Start ``argv`` detached (own session, stdin closed), appending its output to ``log_file``."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with log_file.open("ab") as log:
        try:
            proc = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=dict(env) if env is not None else None,
                cwd=cwd,
            )
        except OSError as exc:
            raise StackError(f"could not start {argv[0]}: {exc}") from exc
    return proc.pid


def run(argv: Sequence[str], what: str, timeout_s: float = 900.0) -> str:
    """Run a short command to completion; raise ``StackError`` with its output when it fails."""
    try:
        done = subprocess.run(
            list(argv), capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise StackError(f"{what} failed: {exc}") from exc
    if done.returncode != 0:
        tail = (done.stdout + done.stderr).strip()[-2000:]
        raise StackError(f"{what} failed (exit {done.returncode}):\n{tail}")
    return done.stdout


def tree_memory_mb(pid: int) -> float:
    """Proportional set size (PSS) of ``pid`` and its descendants, in MiB.

    PSS divides shared pages among the processes that map them, so the sum over a tree such as
    PostgreSQL's backends is not inflated by shared buffers the way summed RSS would be.
    """
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
        except (OSError, IndexError, ValueError):
            continue
    total_kb, todo = 0, [pid]
    while todo:
        current = todo.pop()
        total_kb += _pss_kb(current)
        todo.extend(children.get(current, []))
    return round(total_kb / 1024, 1)


def _pss_kb(pid: int) -> int:
    for name, key in (("smaps_rollup", "Pss:"), ("status", "VmRSS:")):
        try:
            for line in Path(f"/proc/{pid}/{name}").read_text().splitlines():
                if line.startswith(key):
                    return int(line.split()[1])
        except (OSError, ValueError):
            continue
    return 0


def tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log written)"
