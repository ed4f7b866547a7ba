"""Processes as ``/proc`` shows them (Linux): the children of a process, and their command
lines, to wait for what a child process is doing right now; and the thread stacks of a
running es-sched process, for a timeout's message."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

from es_sched.cli.stacks import MARKER
from testkit.wait import wait_until


def children(parent: int, name: str) -> list[int]:
    """The pids of ``parent``'s children called ``name`` (zombies included: those have not
    been reaped yet)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue  # gone meanwhile
        comm = text[text.index("(") + 1 : text.rindex(")")]
        ppid = int(text[text.rindex(")") + 2 :].split()[1])
        if comm == name and ppid == parent:
            found.append(int(stat.parent.name))
    return found


def cmdline(pid: int) -> list[str]:
    """The arguments ``pid`` runs with; empty once it is gone or a zombie."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [arg.decode(errors="replace") for arg in raw.split(b"\0") if arg]


def stacks(proc: subprocess.Popen[bytes], log: Path, timeout_s: float = 10.0) -> str:
    """Every thread's stack of a running ``es-sched run`` or ``es-sched worker`` whose output
    goes to ``log``: SIGUSR1 makes it log them (``es_sched.cli.stacks``); the block it wrote,
    or why there is none. Only for those commands: SIGUSR1 ends any other process."""
    if proc.poll() is not None:
        return "(exited: no stacks)"
    before = log.read_text(errors="replace").count(MARKER)
    proc.send_signal(signal.SIGUSR1)
    try:
        wait_until(
            lambda: log.read_text(errors="replace").count(MARKER) > before,
            timeout_s,
            "the stacks in the log",
        )
    except AssertionError:
        return f"(no stacks logged within {timeout_s:g}s of SIGUSR1)"
    text = log.read_text(errors="replace")
    return text[text.rindex(MARKER) :][:8000]
