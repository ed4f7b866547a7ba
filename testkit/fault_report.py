"""The fault tests' table: one row per fault, printed at the end of the pytest run.

Issue 13 asks every fault test to say what proved the fault fired, how many workflows were in
flight when it fired, which invariants held at the end and how long recovery took. A test calls
``record(Row(...))`` once it has checked all of that (a failing test records nothing); the rows
go to ``build/fault-report.jsonl`` under the checkout (one file per pytest session, emptied when
the session starts) and ``tests/conftest.py`` prints them as a Markdown table in the terminal
summary, so a CI log carries the table the closing note quotes.

Recovery times are observations, never assertions (speed is measured in ``bench/``).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from testkit import ROOT

REPORT = ROOT / "build" / "fault-report.jsonl"
COLUMNS = ("fault", "workflows in flight", "what proved it fired", "invariants", "recovery")


@dataclass(frozen=True)
class Row:
    fault: str
    in_flight: int  # workflows started and not ended at the moment the fault fired
    proof: str  # what showed the fault really happened (a pid gone, a fencing error logged)
    invariants: str  # e.g. "I1-I6 clean (12,345 events)"
    recovery: str  # e.g. "first new event 1.8 s after the restart"


def reset(path: Path = REPORT) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("")


def record(row: Row, path: Path = REPORT) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as out:
        out.write(json.dumps(asdict(row)) + "\n")


def rows(path: Path = REPORT) -> list[Row]:
    if not path.exists():
        return []
    return [Row(**json.loads(line)) for line in path.read_text().splitlines() if line.strip()]


def table(found: list[Row]) -> str:
    """The rows as the Markdown table the closing note uses."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for r in found:
        cells = (r.fault, f"{r.in_flight:,}", r.proof, r.invariants, r.recovery)
        lines.append("| " + " | ".join(c.replace("|", "/") for c in cells) + " |")
    return "\n".join(lines)
