"""The recorded histories under ``tests/fixtures/golden``: ``NAME.events.jsonl`` (one event per
line, as the events topic holds them) and ``NAME.expected.json`` (the state they fold to).
``python -m tests.unit.domain.golden`` records them again."""

from __future__ import annotations

import json
from typing import Any

from es_sched.domain.events import Event
from es_sched.serialization import decode_event
from testkit import ROOT

GOLDEN = ROOT / "tests" / "fixtures" / "golden"
NAMES = sorted(p.name.removesuffix(".events.jsonl") for p in GOLDEN.glob("*.events.jsonl"))


def lines(name: str) -> list[bytes]:
    """The history's records, undecoded."""
    return (GOLDEN / f"{name}.events.jsonl").read_bytes().splitlines()


def history(name: str) -> list[Event]:
    """The history decoded (validated, and upcast where it was written by an older es-sched)."""
    return [decode_event(line) for line in lines(name)]


def expected(name: str) -> Any:
    """The recorded summary of the state the history folds to."""
    return json.loads((GOLDEN / f"{name}.expected.json").read_text())
