"""Debian's chromium for the Playwright tests, never ``playwright install``.

``chromium_path()`` returns ``/usr/lib/chromium/chromium`` when it is there; otherwise, running
as root with apt-get, it installs Debian's ``chromium`` package (as ``es_sched.stack.ffmpeg``
does for ffmpeg) and returns the path. It returns None with the reason when it cannot, so the
test skips saying why instead of failing on a machine without a browser.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

CHROMIUM = Path("/usr/lib/chromium/chromium")
INSTALL = ["apt-get", "install", "-y", "-q", "--no-install-recommends", "chromium"]
# Quiet, headless and alone: no sandbox (containers lack the namespaces), no GPU, nothing that
# phones home or updates itself while a test runs.
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def chromium_path() -> tuple[Path | None, str]:
    """(path, "") when chromium is usable, else (None, why not)."""
    if CHROMIUM.exists():
        return CHROMIUM, ""
    if os.geteuid() != 0:
        return None, f"{CHROMIUM} is missing; run `apt-get update && {' '.join(INSTALL)}` as root"
    if shutil.which("apt-get") is None:
        return None, f"{CHROMIUM} is missing and apt-get is not available to install chromium"
    for command in (["apt-get", "update", "-q"], INSTALL):
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            return None, f"`{' '.join(command)}` failed: {done.stderr.strip()[-500:]}"
    if not CHROMIUM.exists():
        return None, f"`{' '.join(INSTALL)}` succeeded but {CHROMIUM} is still missing"
    return CHROMIUM, ""
