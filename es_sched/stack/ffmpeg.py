"""ffmpeg and ffprobe from Debian's ``ffmpeg`` package, for the media task handlers.

``ensure_ffmpeg()`` does nothing when both binaries are on ``PATH`` (the usual case, one
``shutil.which`` each); otherwise, running as root, it installs the package with
``apt-get update`` and ``apt-get install -y --no-install-recommends ffmpeg``. Without root, or
when apt fails, it raises ``StackError`` naming the command to run. The handlers themselves
(``es_sched.workers.media``) never install anything: they only look the binaries up.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable

from es_sched.errors import StackError
from es_sched.stack import process as proc

BINARIES = ("ffmpeg", "ffprobe")
INSTALL = ["apt-get", "install", "-y", "-q", "--no-install-recommends", "ffmpeg"]


def missing() -> list[str]:
    return [name for name in BINARIES if shutil.which(name) is None]


def ensure_ffmpeg(report: Callable[[str, str], None] | None = None) -> str:
    """Make ``ffmpeg`` and ``ffprobe`` available; returns the ffmpeg path."""
    absent = missing()
    if absent:
        command = " ".join(INSTALL)
        if os.geteuid() != 0:
            raise StackError(
                f"{' and '.join(absent)} not found on PATH; run `apt-get update && {command}` "
                "as root (the media handlers need them)"
            )
        if shutil.which("apt-get") is None:
            raise StackError(
                f"{' and '.join(absent)} not found on PATH and apt-get is not available; "
                "install ffmpeg with this system's package manager"
            )
        if report is not None:
            report("ffmpeg", f"installing ({command})")
        proc.run(["apt-get", "update", "-q"], what="apt-get update")
        proc.run(INSTALL, what=command)
        still = missing()
        if still:
            raise StackError(f"`{command}` succeeded but {', '.join(still)} is still not on PATH")
    found = shutil.which("ffmpeg")
    assert found is not None
    return found
