from __future__ import annotations

from pathlib import Path

from testkit.fault_report import Row, record, reset, rows, table


def test_rows_round_trip_and_render_as_a_markdown_table(tmp_path: Path) -> None:
    path = tmp_path / "faults.jsonl"
    reset(path)
    assert rows(path) == []
    row = Row("kill -9 of the decider", 1234, "pid gone | SIGKILL", "I1-I5 clean", "1.8 s")
    record(row, path)
    assert rows(path) == [row]
    lines = table(rows(path)).splitlines()
    assert lines[0].startswith("| fault | workflows in flight |")
    want = "| kill -9 of the decider | 1,234 | pid gone / SIGKILL | I1-I5 clean | 1.8 s |"
    assert lines[2] == want
