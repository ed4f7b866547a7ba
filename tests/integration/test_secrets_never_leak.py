"""Secrets never leak (issue 52, ADR 72): a role set (decider, dispatcher, the PostgreSQL
projector, the API and a CLI worker, each its own process) runs workflows to the end with every
secret setting given a value no one could write by chance: the Kafka SASL password, a
credentials folder with one file per principal, the TLS key password, the OIDC client secret,
the search engine's password, the API's JWT secret and the media callback key. Then every log
file of the run, every API answer and console page the test fetches, a role's /metrics, the
output of ``es-sched stack status`` and a start-up error are scanned for those values.

On the shared PLAINTEXT broker the Kafka credentials are carried but not sent (the secured
broker is ADR 73's test); each role still builds its connection from them, reading its own
credentials file, which is where a careless log line or error would show them.

What proves the scan can fail: it is first run on a text that holds one of the secrets, and
must find it. The run ends with the audit clean.
"""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from es_sched import bootstrap
from es_sched.audit.check import check
from es_sched.audit.read import read_log
from es_sched.kafka.connection import ROLE_PRINCIPALS
from testkit.api import Api, api
from testkit.cli import es_sched
from testkit.net import free_port
from testkit.runtime import Env, Role, roles
from testkit.wait import wait_until

pytestmark = pytest.mark.integration
WORKFLOWS = 3
NO_USER = ("ES_SCHED_KAFKA_SASL_USERNAME", "ES_SCHED_KAFKA_CREDENTIALS_DIR")


def _secret(name: str) -> str:
    return f"leak-canary-{name}-{uuid.uuid4().hex}"


@pytest.fixture(scope="module")
def secrets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return {
        "kafka": _secret("kafka"),
        "ssl-key": _secret("sslkey"),
        "oidc": _secret("oidc"),
        "search": _secret("search"),
        "jwt": _secret("jwt-0123456789abcdef"),  # 32 bytes and more, as the setting asks
        "callback": _secret("callback"),
        **{p: _secret(p) for p in sorted(set(ROLE_PRINCIPALS.values()))},
    }


@pytest.fixture(scope="module")
def env(secrets: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Env:
    folder = tmp_path_factory.mktemp("kafka-credentials")
    for principal in set(ROLE_PRINCIPALS.values()):
        (folder / principal).write_text(f"es-{principal}:{secrets[principal]}\n")
    env = Env(
        partitions=2,
        extra={
            "ES_SCHED_KAFKA_SASL_USERNAME": "es-scan",
            "ES_SCHED_KAFKA_SASL_PASSWORD": secrets["kafka"],
            "ES_SCHED_KAFKA_CREDENTIALS_DIR": str(folder),
            "ES_SCHED_KAFKA_SSL_KEY_PASSWORD": secrets["ssl-key"],
            "ES_SCHED_KAFKA_OAUTH_CLIENT_SECRET": secrets["oidc"],
            "ES_SCHED_SEARCH_USERNAME": "es-scan",
            "ES_SCHED_SEARCH_PASSWORD": secrets["search"],
            "ES_SCHED_API_JWT_SECRET": secrets["jwt"],
            "ES_SCHED_MEDIA_CALLBACK_SECRET": secrets["callback"],
        },
    )
    env.create()
    return env


def leaks(text: str, secrets: dict[str, str]) -> list[str]:
    """The names of the secrets ``text`` shows."""
    return sorted(name for name, value in secrets.items() if value in text)


@pytest.fixture(scope="module")
def run(env: Env) -> Iterator[tuple[Api, list[Role], int]]:
    task = f"{env.prefix}.step"
    flow = {
        "name": "scan.flow",
        "version": 1,
        "tasks": [{"name": task, "taskReferenceName": "step", "type": "SIMPLE"}],
    }
    env.push(flow, [{"name": task}])
    metrics = free_port()
    worker = Role(env, "worker", argv=["worker", "--noop", "--types", task])
    try:
        with (
            roles(env, "decider", ES_SCHED_RUN_METRICS_PORT=str(metrics)) as deciders,
            roles(env, "dispatcher", "projector-pg") as others,
            api(env) as server,
        ):
            yield server, [*deciders, *others, worker, server.role], metrics
    finally:
        worker.stop()


def fetch(http: httpx.Client, path: str) -> str:
    answer = http.get(path)
    assert answer.status_code == 200, f"{path}: {answer.status_code} {answer.text[:300]}"
    return answer.text


def test_no_secret_in_logs_pages_metrics_status_or_errors(
    env: Env, secrets: dict[str, str], run: tuple[Api, list[Role], int]
) -> None:
    server, processes, metrics_port = run
    assert leaks(f"a line with {secrets['kafka']} in it", secrets) == ["kafka"]  # the scan bites

    ids = []
    for i in range(WORKFLOWS):
        answer = server.http.post(
            "/api/v1/workflows", json={"name": "scan.flow", "input": {"n": i}}
        )
        assert answer.status_code == 201, answer.text
        ids.append(answer.json()["workflowId"])

    def status(wid: str) -> str:
        body: dict[str, Any] = server.http.get(f"/api/v1/workflows/{wid}").json()
        return str(body.get("workflow", {}).get("status", ""))

    wait_until(lambda: all(status(w) == "COMPLETED" for w in ids), 120, "the workflows to complete")

    seen: dict[str, str] = {}
    for path in (
        "/openapi.json",
        "/api/v1/workflows",
        f"/api/v1/workflows/{ids[0]}",
        f"/api/v1/workflows/{ids[0]}/history",
        "/api/v1/workers",
        "/api/v1/queues",
        "/api/v1/system",
        f"/api/workflow/{ids[0]}",
        "/api/metadata/workflow",
        "/ui/",
        "/ui/workers",
        "/ui/queues",
        "/ui/system",
        "/ui/definitions",
        "/ui/taskdefs",
        f"/ui/workflows/{ids[0]}",
        f"/ui/workflows/{ids[0]}/history",
    ):
        seen[path] = fetch(server.http, path)
    seen["decider /metrics"] = fetch(httpx.Client(), f"http://127.0.0.1:{metrics_port}/metrics")
    assert "es_sched_" in seen["decider /metrics"]

    status_run = es_sched("stack", "status", env=env.vars)
    seen["stack status"] = status_run.stdout + status_run.stderr
    # A start-up error beside the secrets: SASL asked for with no user for the principal.
    refused = es_sched(
        "stack",
        "status",
        env={
            **{k: v for k, v in env.vars.items() if k not in NO_USER},
            "ES_SCHED_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
        },
    )
    seen["config error"] = refused.stdout + refused.stderr
    assert refused.returncode != 0 and "ES_SCHED_KAFKA" in seen["config error"]

    for role in processes:
        role.stop()
    logs = {str(role.log): role.text() for role in processes}
    assert all(logs.values()), "every process wrote a log"
    assert "started" in logs[str(processes[0].log)]

    found = {where: leaks(text, secrets) for where, text in {**seen, **logs}.items()}
    assert not {where: names for where, names in found.items() if names}, found
    print(
        f"\nsecret scan: {len(secrets)} secrets, {len(seen)} answers and pages, "
        f"{len(logs)} log files ({sum(len(t) for t in logs.values())} chars): no secret found"
    )
    out = Path(tempfile.gettempdir()) / "es-sched-test-roles" / "secret_scan.txt"
    out.write_text("\n".join(sorted({**seen, **logs})) + "\n")

    report = check(read_log(env.settings), False, bootstrap.script_engine())
    assert report.ok, "\n".join(v.line() for v in report.violations[:20])
    assert len(report.states) == WORKFLOWS
