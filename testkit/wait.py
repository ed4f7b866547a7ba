"""Waiting on facts instead of sleeping: ``wait_until`` polls a check and, on timeout, fails
naming what it waited for; ``wait_for_log`` waits for a line of a child process's log."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from pathlib import Path

MAX_PAUSE_S = 1.0


def wait_until(
    check: Callable[[], bool],
    timeout_s: float,
    what: str | Callable[[], str],
    every_s: float = 0.05,
) -> None:
    """Return once ``check()`` is true; raise ``AssertionError`` naming ``what`` after
    ``timeout_s``. ``what`` may be a callable, to describe the state at the timeout.

    Between checks it pauses ``every_s``, or as long as the check itself took (up to a
    second): an expensive check, such as reading a whole topic, then uses at most about half
    of a core while it waits.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        started = time.monotonic()
        if check():
            return
        took = time.monotonic() - started
        if time.monotonic() >= deadline:
            described = what() if callable(what) else what
            raise AssertionError(f"timed out after {timeout_s:g}s waiting for {described}")
        time.sleep(max(every_s, min(took, MAX_PAUSE_S)))


def wait_for_log(
    log: Path, text: str, timeout_s: float, proc: subprocess.Popen[bytes] | None = None
) -> None:
    """Return once ``text`` is in ``log``; fail at once, with the log's tail, when ``proc``
    exits first, and after ``timeout_s`` otherwise."""

    def seen() -> bool:
        exited = proc is not None and proc.poll() is not None  # before reading: no lost line
        if text in log.read_text(errors="replace"):
            return True
        if exited:
            assert proc is not None
            raise AssertionError(
                f"{log.name}: exited {proc.returncode} before {text!r}:\n{_tail(log)}"
            )
        return False

    wait_until(seen, timeout_s, lambda: f"{text!r} in {log}:\n{_tail(log)}")


def _tail(log: Path) -> str:
    return log.read_text(errors="replace")[-3000:]
