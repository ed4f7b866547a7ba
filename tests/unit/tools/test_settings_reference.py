"""docs/settings.md is the output of tools/settings_reference.py: a setting added, removed or
redescribed in es_sched/settings.py without the page regenerated fails here."""

from __future__ import annotations

import subprocess
import sys

from testkit import ROOT

REGENERATE = ".venv/bin/python tools/settings_reference.py > docs/settings.md  (or: make docs)"


def test_committed_reference_is_the_generated_one() -> None:
    generated = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "settings_reference.py")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    committed = (ROOT / "docs" / "settings.md").read_text()
    assert committed == generated, f"docs/settings.md is stale; regenerate it: {REGENERATE}"


def test_every_setting_is_described() -> None:
    page = (ROOT / "docs" / "settings.md").read_text()
    rows = [line for line in page.splitlines() if line.startswith("| `ES_SCHED_")]
    assert rows
    undescribed = [row.split("`")[1] for row in rows if row.rstrip().endswith("|  |")]
    assert not undescribed, f"no description (a Field description or a comment): {undescribed}"
