"""Tests that stand in for "a core change" by replacing a function of ``es_sched.domain``.

A compiled core (ADR 51) binds its calls between modules when it is built, so replacing
``retry.retry_delay`` in a test changes nothing its compiled callers do. Such a test runs its
body in a child pytest whose core is the Python files (``ES_SCHED_CORE=pure``): the same rule,
changed where the test changes it, and the child's verdict is the test's.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import es_sched.domain


def rerun_with_python_core(nodeid: str) -> bool:
    """Run test ``nodeid`` in a child with the Python core when this process runs the compiled
    one, and fail unless it passed there; False when this process's core is Python (the caller
    then runs its body here)."""
    if es_sched.domain.CORE != "compiled":
        return False
    env = {**os.environ, "ES_SCHED_CORE": "pure"}
    child = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", nodeid],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    passed = child.returncode == 0 and re.search(r"^1 passed", child.stdout, re.M)
    assert passed, child.stdout[-3000:]
    return True


def run_with_python_core(code: str, env: dict[str, str]) -> str:
    """Run ``code`` (a Python program) in a child whose core is the Python files, with ``env``
    added to this process's environment; its standard output, or a failure with its errors."""
    child = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, **env, "ES_SCHED_CORE": "pure"},
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert child.returncode == 0, child.stderr[-3000:]
    return child.stdout
