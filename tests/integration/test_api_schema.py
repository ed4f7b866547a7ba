"""Schemathesis over ``/openapi.json`` of a live ``es-sched api`` with auth on (issue 14 item 5):
every operation in the document, a bounded number of generated inputs each; no 5xx on any
input, and every 4xx says why (``schemathesis_hooks.reason_on_4xx``). Run as ``st run``, the
way a user runs it; its summary is printed (``pytest -s`` shows it).

The stack behind it is real (decider, dispatcher, both projectors, with one finished
workflow in the read models) so routes answer from real data; the first run's calls carry an
admin token, so each reaches its handler rather than stopping at 401; a short second run sends
none, so every 401 is checked for the token protocol's ``error``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from testkit.api import api
from testkit.runtime import Env, Worker, roles
from testkit.scale import pick
from testkit.wait import wait_until

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SECRET = "schema-test-jwt-secret-0123456789abcdef"
EXAMPLES = pick(ci=5, full=25)  # generated inputs per operation in the fuzzing phase
DEFINITION = {
    "name": "schema_probe",
    "version": 1,
    "schemaVersion": 2,
    "tasks": [{"name": "probe", "taskReferenceName": "probe", "type": "SIMPLE"}],
}
TASKDEFS = [{"name": "probe", "retryCount": 0, "timeoutSeconds": 60, "responseTimeoutSeconds": 30}]


def test_no_5xx_and_every_4xx_has_a_reason() -> None:
    env = Env()
    env.create()
    with roles(env, "decider", "dispatcher", "projector-pg", "projector-search"), Worker(env):
        env.push(DEFINITION, TASKDEFS)
        env.submit("schema_probe", [{"n": 1}])
        with api(env, ES_SCHED_API_AUTH="on", ES_SCHED_API_JWT_SECRET=SECRET) as server:
            made = json.loads(env.cli("api", "keys", "create", "--role", "admin", "--json"))
            creds = {"keyId": made["keyId"], "keySecret": made["keySecret"]}
            token = server.http.post("/api/token", json=creds).json()["token"]
            # Not the revocation of keys: the fuzzer found the id of the key it runs with (a
            # HAR report showed DELETE /api/v1/keys/<that id> answered 200) and every later
            # operation stopped at 401. Revocation has its own tests (test_api_auth.py).
            done = st_run(f"{server.url}/openapi.json", token, EXAMPLES, REVOKE)
            print(done.stdout[-6000:])
            assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
            # With the admin token every operation reached its handler (none answered only
            # 401/403): the run exercised the routes, not the door.
            assert "returned only 401/403" not in done.stdout, done.stdout[-6000:]
            # Without a token: every route that requires a role answers 401 with ``error``.
            anonymous = st_run(f"{server.url}/openapi.json", None, 3)
            print(anonymous.stdout[-3000:])
            assert anonymous.returncode == 0, anonymous.stdout[-6000:] + anonymous.stderr[-3000:]
            wait_until(lambda: server.role.proc.poll() is None, 1, "the API still running")


REVOKE = ("--exclude-operation-id", "revoke_key_api_v1_keys__key_id__delete")


def st_run(
    document: str, token: str | None, examples: int, extra: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    st = Path(sys.executable).with_name("st")
    argv = [
        str(st),
        "run",
        document,
        "--checks",
        "not_a_server_error,reason_on_4xx",
        "--phases",
        "examples,coverage,fuzzing",
        "--max-examples",
        str(examples),
        "--seed",
        "14",
        "--workers",
        "1",
        "--generation-database",
        "none",
        "--request-timeout",
        "60",
        *(["--header", f"X-Authorization: {token}"] if token else []),
        *extra,
    ]
    env = {
        **os.environ,
        "SCHEMATHESIS_HOOKS": "tests.integration.schemathesis_hooks",
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "NO_COLOR": "1",
    }
    return subprocess.run(
        argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800, check=False
    )
