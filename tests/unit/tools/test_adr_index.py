"""docs/adr/README.md is the output of tools/adr_index.py, and every ADR page has the shape
the index reads: a numbered title, a status, context, decision and consequences."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from testkit import ROOT

PAGES = sorted((ROOT / "docs" / "adr").glob("[0-9][0-9][0-9][0-9]-*.md"))


def test_committed_index_is_the_generated_one() -> None:
    generated = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "adr_index.py")],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    committed = (ROOT / "docs" / "adr" / "README.md").read_text()
    assert committed == generated, "regenerate: python tools/adr_index.py > docs/adr/README.md"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name[:4])
def test_an_adr_is_one_decision_with_a_status(page: Path) -> None:
    text = page.read_text()
    number = int(page.name[:4])
    assert text.startswith(f"# {number}. ")
    assert "\nStatus: " in text
    for section in ("## Context", "## Decision", "## Consequences"):
        assert f"\n{section}" in text, f"{page.name} has no {section}"
