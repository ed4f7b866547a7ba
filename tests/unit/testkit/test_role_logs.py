"""``testkit.role_logs``: what a failed integration test's report shows of a role's log."""

from __future__ import annotations

from pathlib import Path

from testkit import role_logs


def test_a_log_shows_its_warnings_and_errors_then_its_last_lines(tmp_path: Path) -> None:
    log = tmp_path / "decider.log"
    lines = [f"2026-12-04 10:00:{i:02d},000 INFO es_sched.decider: step {i}" for i in range(20)]
    lines[3] = "2026-12-04 10:00:03,000 WARNING es_sched.kafka.transactional: abort failed too"
    lines[18] = "2026-12-04 10:00:18,000 ERROR es_sched.kafka.transactional: re-creating"
    log.write_text("\n".join(lines) + "\n")
    shown = role_logs.notable(log).splitlines()
    assert shown[0] == "20 lines; warnings and errors (2 shown):"
    assert shown[1:3] == [lines[3], lines[18]]
    assert shown[3] == "last lines:"
    assert shown[4:] == [lines[15], lines[16], lines[17], lines[19]]  # line 18 shown above


def test_take_hands_each_started_log_over_once(tmp_path: Path) -> None:
    role_logs.take()
    first, second = tmp_path / "a.log", tmp_path / "b.log"
    assert role_logs.started(first) == first
    role_logs.started(second)
    assert role_logs.take() == [first, second]
    assert role_logs.take() == []
    assert role_logs.notable(first).startswith("(unreadable: ")
