"""``es-sched stats``: the latest proposals on the stats topic as tables, or as JSON lines."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from es_sched.cli import stats as cli_stats
from es_sched.domain.learned import FailureRate, RunStats

pytestmark = pytest.mark.unit
END = "2026-12-07T12:05:00+00:00"
RUN = RunStats("transcode", "h720-d60-h264", END, 20, 10, 19, 20, 5.5, 10.5, 2, 0.09, {"boom": 2})
RATE = FailureRate("version", "transcode", "1.4.0", END, 22, 2, 2 / 22)
OTHER = RunStats("thumbnail", "any", END, 3, 1, 2, 2, 0, 0, 0, 0.0)


@pytest.fixture(autouse=True)
def topic(monkeypatch: pytest.MonkeyPatch) -> None:
    found = {s.key: s for s in (RUN, RATE, OTHER)}
    monkeypatch.setattr(cli_stats, "latest", lambda _settings: found)


def test_prints_run_times_and_failure_rates() -> None:
    shown = CliRunner().invoke(cli_stats.stats, ["--type", "transcode"], env={"COLUMNS": "250"})
    assert shown.exit_code == 0, shown.output
    runtime_row = next(line for line in shown.output.splitlines() if "h720-d60-h264" in line)
    assert "19.00" in runtime_row and "10.50" in runtime_row and "boom 2" in runtime_row
    rate_row = next(line for line in shown.output.splitlines() if "1.4.0" in line)
    assert "version" in rate_row and "9.1%" in rate_row
    assert "thumbnail" not in shown.output


def test_json_lines_are_the_published_records() -> None:
    shown = CliRunner().invoke(cli_stats.stats, ["--json"])
    lines = [json.loads(line) for line in shown.output.splitlines()]
    assert [d["key"] for d in lines] == sorted([RUN.key, RATE.key, OTHER.key])
    assert next(d for d in lines if d["key"] == RATE.key)["failures"] == 2
