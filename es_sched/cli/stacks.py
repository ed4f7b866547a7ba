"""Every thread's Python stack, in the log: on ``kill -USR1 <pid>`` of ``es-sched run`` or
``es-sched worker``, and for the roles that did not stop in time after SIGTERM.

For an operator (and a fault test's timeout message) the first question about a role that
stopped making progress is where its thread waits. ``py-spy dump`` answers it too, but needs
ptrace rights; this needs only the right to signal the process. The handler runs in the main
thread, which only joins the role threads, so it answers within their join interval.
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
import traceback
from types import FrameType

log = logging.getLogger("es_sched.stacks")
MARKER = "thread stacks"  # the first words of the logged block (tests wait for it)


def format_stacks(only: set[str] | None = None) -> str:
    """Each live thread's name and stack, innermost call last; ``only`` these names if given."""
    frames = sys._current_frames()
    parts = []
    for thread in threading.enumerate():
        frame = frames.get(thread.ident or -1)
        if frame is None or (only is not None and thread.name not in only):
            continue
        stack = "".join(traceback.format_stack(frame))
        parts.append(f'Thread "{thread.name}" (daemon={thread.daemon}):\n{stack}')
    return "\n".join(parts)


def log_stacks(reason: str, only: set[str] | None = None) -> None:
    log.warning("%s (%s):\n%s", MARKER, reason, format_stacks(only))


def install() -> None:
    """``SIGUSR1`` logs every thread's stack; the process goes on."""

    def on_usr1(_signum: int, _frame: FrameType | None) -> None:
        log_stacks("SIGUSR1")

    signal.signal(signal.SIGUSR1, on_usr1)
