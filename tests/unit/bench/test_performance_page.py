"""docs/performance.md is what bench/report.py makes of the committed bench/results/current/
files, so no figure on the page can drift from its JSON, and a file put in current/ without an
index entry (its rerun command, how to count its runs) stops the page."""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import pytest

from testkit import ROOT

sys.path.insert(0, str(ROOT / "bench"))  # the benches are scripts, not a package
import report


def test_the_committed_page_is_what_the_committed_results_generate() -> None:
    assert report.PAGE.read_text() == report.page(), (
        "docs/performance.md is stale: run .venv/bin/python bench/report.py"
    )


def test_every_current_result_has_an_index_entry_and_every_entry_a_file() -> None:
    assert set(report.load()) == set(report.SOURCES)


def test_every_link_on_the_page_reaches_a_committed_file() -> None:
    page = report.PAGE.read_text()
    targets = set(re.findall(r"\]\(([^)#]+)\)", page))
    assert targets, "the page links no file"
    missing = sorted(t for t in targets if not (report.PAGE.parent / t).resolve().exists())
    assert missing == []


def test_a_result_nobody_indexed_stops_the_page(tmp_path: Path) -> None:
    for path in report.CURRENT.glob("*.json"):
        shutil.copy(path, tmp_path)
    shutil.copy(report.CURRENT / "e2e.json", tmp_path / "e2e_another_try.json")
    with pytest.raises(SystemExit, match=re.escape("e2e_another_try.json")):
        report.page(tmp_path)


def test_an_absent_file_leaves_its_rows_out(tmp_path: Path) -> None:
    for path in report.CURRENT.glob("*.json"):
        if path.name != "replay.json":
            shutil.copy(path, tmp_path)
    page = report.page(tmp_path)
    assert "replay.json" not in page
    assert "side_by_side.json" in page


@pytest.mark.parametrize(
    ("value", "shown"),
    [(None, "-"), (11025, "11,025"), (1742.8, "1,743"), (130.73, "130.7"), (0.0189, "0.0189")],
)
def test_figures_are_printed_to_four_significant_digits_and_thousands_grouped(
    value: float | None, shown: str
) -> None:
    assert report.num(value) == shown
