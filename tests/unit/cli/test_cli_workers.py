"""``es-sched workers``: the blacklistings in force from the config records, and a lift written
as a record (ADR 58); the config topic is a dict here."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from click.testing import CliRunner

from es_sched.blacklist import Blacklisting, Failure
from es_sched.cli import workers as cli_workers
from es_sched.serialization import config as config_records

pytestmark = pytest.mark.unit


@pytest.fixture
def topic(monkeypatch: pytest.MonkeyPatch) -> dict[str, dict[str, Any]]:
    records: dict[str, dict[str, Any]] = {}

    def publish(_settings: object, key: str, value: dict[str, Any]) -> None:
        config_records.parse(key, config_records.encode(value))  # as the real client checks
        records[key] = value

    monkeypatch.setattr(cli_workers, "current", lambda _settings: dict(records))
    monkeypatch.setattr(cli_workers, "publish", publish)
    return records


def benched(worker_id: str, minutes: float) -> dict[str, Any]:
    now = datetime.now(UTC)
    fault = Failure("t1", "GPU driver error", now, "host fault")
    until = now + timedelta(minutes=minutes)
    return Blacklisting(worker_id, "media", now, until, (fault,), 2).as_record()


def test_blacklist_lists_those_in_force_and_lift_writes_the_lift(
    topic: dict[str, dict[str, Any]],
) -> None:
    topic["blacklist:m1"] = benched("m1", 5)
    topic["blacklist:old"] = benched("old", -1)  # its penalty is over
    runner = CliRunner()
    shown = runner.invoke(cli_workers.workers, ["blacklist"])
    assert shown.exit_code == 0 and "m1  pool media  until" in shown.output
    assert "1 of 2 failed" in shown.output and "t1: GPU driver error" in shown.output
    assert "old" not in shown.output
    refused = runner.invoke(cli_workers.workers, ["lift", "old"])
    assert refused.exit_code == 1 and "not blacklisted" in refused.output
    done = runner.invoke(cli_workers.workers, ["lift", "m1", "--by", "alice"])
    assert done.exit_code == 0, done.output
    assert topic["blacklist:m1"]["state"] == "lifted" and topic["blacklist:m1"]["by"] == "alice"
    assert "(no worker is blacklisted)" in runner.invoke(cli_workers.workers, ["blacklist"]).output
