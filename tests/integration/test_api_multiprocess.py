"""``es-sched api --workers 2`` (ES_SCHED_API_WORKERS=2) as a user runs it: two worker
processes under uvicorn's supervisor on one port, auth on with no JWT key configured, and a
token issued by whichever worker took ``POST /api/token`` accepted on every connection after
it (the supervisor gives all workers one key), and the supervisor stops its workers on
SIGTERM."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from testkit.api import api, keyed_env
from testkit.runtime import Env
from testkit.wait import wait_until

pytestmark = pytest.mark.integration


def _children(pid: int) -> set[int]:
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:  # the parent's pid, after the state
            found.add(int(stat.parent.name))
    return found


@pytest.fixture
def env() -> Iterator[Env]:
    with keyed_env() as env:
        yield env


def test_two_workers_share_the_port_and_one_token_key(env: Env) -> None:
    made = json.loads(env.cli("api", "keys", "create", "--role", "viewer", "--json"))
    with api(env, ES_SCHED_API_AUTH="on", ES_SCHED_API_WORKERS="2") as server:
        workers = _children(server.role.proc.pid)
        answer = server.http.post(
            "/api/token", json={"keyId": made["keyId"], "keySecret": made["keySecret"]}
        )
        assert answer.status_code == 200, answer.text
        token = answer.json()["token"]
        # A new connection each time: the kernel hands them to either worker.
        statuses = [
            httpx.get(
                f"{server.url}/api/token/userInfo", headers={"X-Authorization": token}, timeout=30
            ).status_code
            for _ in range(30)
        ]
        log = server.role.text()
    assert len(workers) >= 2, f"expected two worker processes, saw {workers}:\n{log}"
    assert statuses == [200] * 30, log
    assert server.role.proc.wait(60) is not None
    # Reparented and reaped once the supervisor is gone: wait for the fact, not a while.
    wait_until(
        lambda: not any(Path(f"/proc/{w}").exists() for w in workers),
        30,
        "the workers to exit after the supervisor's SIGTERM",
    )
