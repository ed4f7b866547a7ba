"""``es-sched`` as a user runs it: a child process of this interpreter, in the checkout, with
``ES_SCHED_*`` variables added to the environment."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping

from testkit import ROOT


def es_sched(
    *args: str, env: Mapping[str, str] | None = None, timeout_s: float = 400
) -> subprocess.CompletedProcess[str]:
    """Run ``es-sched ARGS`` to its end; the caller checks ``returncode`` and the output."""
    return subprocess.run(
        [sys.executable, "-m", "es_sched", *args],
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
