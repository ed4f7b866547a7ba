"""ADR 73: the ACL file names real topics, and expands per prefix and pool."""

from __future__ import annotations

import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from es_sched.kafka.connection import ROLE_PRINCIPALS
from es_sched.kafka.topics import Topics, assignment_topic
from es_sched.settings import StackSettings, load_settings
from es_sched.stack.kafka import server_properties
from es_sched.stack.kafka_security import ADMIN, LocalSecurity, grants, principals

pytestmark = pytest.mark.unit
POOLS = ["default", "gpu"]


def test_every_topic_the_file_names_is_one_es_sched_makes() -> None:
    made = {t.name for t in Topics("p", 2).all()} | {assignment_topic("p", p) for p in POOLS}
    made |= {"p.assignments.gateway", "p.analytics-"}  # the API's gateway pool; faust's own
    for g in grants("p", POOLS):
        if g.resource != "topic":
            continue
        if g.prefixed:
            assert any(m.startswith(g.name) for m in made), g
        else:
            assert g.name in made, g


def test_every_role_principal_has_a_user_and_pools_expand() -> None:
    users = principals(POOLS)
    assert users[0] == ADMIN
    assert set(ROLE_PRINCIPALS.values()) <= set(users)
    assert {"worker-default", "worker-gpu", "upstream"} <= set(users)
    reads = {(g.principal, g.name) for g in grants("p", POOLS) if g.operation == "read"}
    assert ("worker-default", "p.assignments") in reads
    assert ("worker-gpu", "p.assignments.gpu") in reads
    assert ("worker-gpu", "p.assignments") not in reads


def test_least_privilege_as_the_issue_lists_it() -> None:
    def ops(principal: str, op: str) -> set[str]:
        return {
            g.name.removeprefix("p.")
            for g in grants("p", POOLS)
            if g.principal == principal and g.operation == op and g.resource == "topic"
        }

    assert ops("upstream", "write") == {"commands"}
    assert "events" not in ops("upstream", "read")
    assert ops("projector", "read") == {"events", "system"}
    assert "events" not in ops("projector", "write")
    assert ops("worker-default", "write") == {"task-results", "worker-status", "system"}
    assert "commands" in ops("api", "write") and "events" not in ops("api", "write")


def test_a_secured_node_listens_on_sasl_ssl_and_keeps_the_operators_extras() -> None:
    secured = {"listeners": "SASL_SSL://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093", "x.y": "1"}
    text = server_properties(9092, 9093, "/d", extra={"x.y": "2"}, secured=secured)
    assert "listeners=SASL_SSL://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093\n" in text
    assert "x.y=2\n" in text and "x.y=1" not in text


def test_the_local_ca_signs_a_broker_certificate_for_loopback(tmp_path: Path) -> None:
    """openssl's four steps, in a state folder whose path holds a space: the broker's PEM
    holds a PKCS#8 key and a certificate for 127.0.0.1 that the CA verifies."""
    state = tmp_path / "stack state"
    settings = load_settings()
    local = LocalSecurity(replace(settings, stack=StackSettings(state_dir=state)))
    local.prepare()
    pem = local.broker_pem.read_text()
    assert pem.startswith("-----BEGIN PRIVATE KEY-----")  # PKCS#8, as Kafka's PEM store wants
    crt = local.tls / "broker.crt"
    verified = subprocess.run(
        ["openssl", "verify", "-CAfile", str(local.ca), str(crt)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert verified.returncode == 0, verified.stderr
    text = subprocess.run(
        ["openssl", "x509", "-in", str(crt), "-noout", "-ext", "subjectAltName"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "IP Address:127.0.0.1" in text and "DNS:localhost" in text
    assert oct(local.broker_pem.stat().st_mode & 0o777) == "0o600"
