"""`es-sched stack` as a user drives it: status, idempotent up, and a full up/down cycle.

The first two tests look at the stack that `make test` started. The lifecycle test runs a second,
private stack in a temporary state folder on other ports (sharing only the Maven cache), so it
can stop everything without disturbing the other tests.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from es_sched.settings import load_settings
from es_sched.stack import process
from testkit.cli import es_sched

pytestmark = pytest.mark.e2e


def status_json(env: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
    done = es_sched("stack", "status", "--json", env=env)
    return done.returncode, json.loads(done.stdout)


def test_status_json_shows_all_three_services_healthy() -> None:
    code, doc = status_json()
    assert code == 0, doc
    assert doc["mode"] in ("local", "docker")
    for role in ("kafka", "postgres", "search"):
        assert doc[role]["healthy"] is True, doc[role]
        assert doc[role]["endpoint"]
    assert doc["kafka"]["endpoint"] == load_settings().kafka.bootstrap_servers


def test_a_second_stack_up_changes_nothing() -> None:
    _, before = status_json()
    done = es_sched("stack", "up")
    assert done.returncode == 0, done.stderr
    _, after = status_json()
    for role in ("kafka", "postgres", "search"):
        assert after[role]["pid"] == before[role]["pid"]
        assert after[role]["managed"] == before[role]["managed"]
    if before["kafka"]["managed"] == "local":
        assert done.stderr.count("already running") == 3
        assert "started pid" not in done.stderr


def test_up_then_down_in_a_private_state_folder_leaves_no_process(tmp_path: Path) -> None:
    shared_cache = load_settings().stack.resolved_cache_dir
    env = {
        "ES_SCHED_STACK_STATE_DIR": str(tmp_path / "state"),
        "ES_SCHED_STACK_CACHE_DIR": str(shared_cache),
        "ES_SCHED_STACK_MODE": "local",
        "ES_SCHED_KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:19092",
        "ES_SCHED_STACK_KAFKA_CONTROLLER_PORT": "19093",
        "ES_SCHED_PG_URL": "postgresql+psycopg://e2e:e2e-secret@127.0.0.1:25432/e2e_db",
        "ES_SCHED_SEARCH_URL": "http://127.0.0.1:9250",
        "ES_SCHED_STACK_SEARCH_HEAP": "384m",
    }
    try:
        up = es_sched("stack", "up", env=env)
        assert up.returncode == 0, up.stdout + up.stderr
        code, doc = status_json(env)
        assert code == 0, doc
        pids = {role: doc[role]["pid"] for role in ("kafka", "postgres", "search")}
        assert all(doc[r]["managed"] == "local" and doc[r]["healthy"] for r in pids), doc
        assert all(isinstance(pid, int) for pid in pids.values())
        assert doc["postgres"]["endpoint"].startswith("postgresql://e2e@127.0.0.1:25432/e2e_db")
    finally:
        down = es_sched("stack", "down", env=env)
    assert down.returncode == 0, down.stderr
    for role, pid in pids.items():
        assert not Path(f"/proc/{pid}").exists() or not process.cmdline_contains(
            pid, str(tmp_path)
        ), f"{role} pid {pid} still running"
    assert not list((tmp_path / "state" / "pids").glob("*.pid"))
    code, doc = status_json(env)
    assert code == 1
    assert [doc[r]["healthy"] for r in ("kafka", "postgres", "search")] == [False] * 3
    assert {doc[r]["managed"] for r in ("kafka", "postgres", "search")} == {"stopped"}
