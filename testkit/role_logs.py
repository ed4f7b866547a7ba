"""The role processes' logs a test started, shown in its report when it fails.

A role's log is a file in a temporary directory that a CI checkout does not keep (CI, stop 31:
a fault test failed on what its decider had logged, and the assertion's message showed only the
log's first and last lines). ``started`` records each log a role process writes
(``runtime_harness.Role``); the integration conftest's report hook adds ``notable`` of every log
the failed test started to its report, so the CI output says what the roles saw.
"""

from __future__ import annotations

from pathlib import Path

MARKS = (" WARNING ", " ERROR ", " CRITICAL ", "Traceback", "Error:", "Exception:")
NOTABLE_LINES = 60  # the last warnings and errors of a log
LAST_LINES = 5  # and its last lines, whatever they are

_started: list[Path] = []


def started(log: Path) -> Path:
    """``log``, recorded."""
    _started.append(log)
    return log


def take() -> list[Path]:
    """The logs started since the last ``take``, forgotten here."""
    out = list(_started)
    _started.clear()
    return out


def notable(log: Path) -> str:
    """The log's last warnings and errors, then its last lines (or why it cannot be read)."""
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError as exc:
        return f"(unreadable: {exc})"
    marked = [line for line in lines if any(m in line for m in MARKS)][-NOTABLE_LINES:]
    last = [line for line in lines[-LAST_LINES:] if line not in marked[-LAST_LINES:]]
    parts = [f"{len(lines)} lines; warnings and errors ({len(marked)} shown):", *marked]
    return "\n".join([*parts, "last lines:", *last] if last else parts)
