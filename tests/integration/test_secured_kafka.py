"""A secured Kafka (ADR 73): a PRIVATE broker this module starts with ``es-sched stack up --only
kafka`` and ``ES_SCHED_STACK_KAFKA_SECURITY=sasl_ssl`` (own state folder under the test's tmp,
own ports 19250/19251; the jar cache is the shared stack's): SASL/SCRAM-SHA-512 over TLS with
the throwaway CA the stack made, one SCRAM user per principal, and the ACLs of
``es_sched/stack/resources/acls.yaml`` for this test's topic prefix.

- A role set (decider, dispatcher, a CLI worker of the default pool), each process as its own
  principal, runs workflows submitted by an upstream principal to the end over SASL_SSL.
- The broker refuses what least privilege forbids, seen from real clients: a worker principal
  writing a command, the upstream principal reading events, a projector writing events, a
  worker reading another pool's assignments. Each refusal is the broker's authorization error
  (TOPIC_AUTHORIZATION_FAILED), which proves the denial came from the ACLs and not from the
  client; the same client writing what it may shows the principal itself works. The matrix is
  printed and written to ``<tmp>/es-sched-test-roles/acl_matrix.txt``.

The run ends with the audit clean.
"""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from es_sched import bootstrap
from es_sched.audit.check import check
from es_sched.audit.read import read_log
from es_sched.commands.client import CommandClient
from es_sched.kafka.clients import consumer, producer, read_partitions
from es_sched.kafka.connection import KafkaConnection, connection
from es_sched.settings import load_settings
from testkit.cli import es_sched
from testkit.runtime import Env, Role, roles
from testkit.wait import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.secured]
WORKFLOWS = 3
DENIED = (KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.GROUP_AUTHORIZATION_FAILED)


class SecuredBroker:
    def __init__(
        self, state: Path, prefix: str, port: int = 19250, controller: int = 19251
    ) -> None:
        # Ports below the ephemeral range, as tests/integration/private_cluster.py's: a port
        # free_port() handed out could be taken by an outgoing connection before Kafka binds.
        self.bootstrap = f"127.0.0.1:{port}"
        self.vars = {
            "ES_SCHED_STACK_STATE_DIR": str(state),
            "ES_SCHED_STACK_CACHE_DIR": str(load_settings().stack.resolved_cache_dir),
            "ES_SCHED_STACK_MODE": "local",
            "ES_SCHED_KAFKA_BOOTSTRAP_SERVERS": self.bootstrap,
            "ES_SCHED_STACK_KAFKA_CONTROLLER_PORT": str(controller),
            "ES_SCHED_STACK_KAFKA_HEAP": "384m",
            "ES_SCHED_STACK_KAFKA_SECURITY": "sasl_ssl",
            "ES_SCHED_KAFKA_TOPIC_PREFIX": prefix,
            "ES_SCHED_STACK_KAFKA_POOLS": '["default", "gpu"]',
        }
        # What every client of this broker is told (ADR 72): the stack's CA and credentials.
        self.client_vars = {
            "ES_SCHED_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
            "ES_SCHED_KAFKA_CREDENTIALS_DIR": str(state / "kafka-credentials"),
            "ES_SCHED_KAFKA_SSL_CA_LOCATION": str(state / "kafka-tls" / "ca.pem"),
        }

    def stack(self, *args: str) -> str:
        done = es_sched("stack", *args, "--only", "kafka", env=self.vars)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout + done.stderr

    def up(self) -> None:
        """``stack up``. Under pytest (never from a shell or a script making the same call) the
        first ``up`` of a fresh state folder has said "exited during start-up" while the JVM
        it started was alive and went on to start (its /proc entry sampled every 0.3 s showed
        it sleeping, reparented to init): the manager's one look at the PID missed it. Not
        understood yet; a second ``up`` finds the running node and waits for it, as an
        operator would."""
        done = es_sched("stack", "up", "--only", "kafka", env=self.vars)
        if done.returncode != 0 and "exited during start-up" in done.stderr:
            done = es_sched("stack", "up", "--only", "kafka", env=self.vars)
        assert done.returncode == 0, done.stdout + done.stderr


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    prefix = f"t{uuid.uuid4().hex[:12]}"
    broker = SecuredBroker(tmp_path_factory.mktemp("secured-kafka"), prefix)
    try:
        broker.up()
        env = Env(prefix=prefix, partitions=2, bootstrap=broker.bootstrap, extra=broker.client_vars)
        env.create()
        yield env
    finally:
        broker.stack("down")


def as_principal(env: Env, principal: str) -> KafkaConnection:
    return connection(env.settings.kafka, principal)


def write(conn: KafkaConnection, topic: str) -> KafkaError | None:
    """One record to ``topic`` as ``conn``'s principal: the broker's error, or None."""
    p = producer(conn, None, **{"message.timeout.ms": 15000})
    got: list[KafkaError | None] = []
    p.produce(topic, key=b"k", value=b"{}", on_delivery=lambda err, _msg: got.append(err))
    p.flush(30)
    assert got, f"no delivery report for {topic}"
    return got[0]


def read(conn: KafkaConnection, topic: str, group: str | None = None) -> KafkaError | None:
    """Fetch from ``topic`` partition 0 as ``conn``'s principal: the broker's error, or None."""
    c = consumer(conn, group)
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        for _ in range(20):
            msg = c.poll(0.5)
            err = msg.error() if msg is not None else None
            if err is not None and err.code() in DENIED:
                return err
            if c.position([TopicPartition(topic, 0)])[0].offset >= 0 or msg is not None:
                return None
        return None
    except KafkaException as exc:
        found: KafkaError = exc.args[0]
        return found
    finally:
        c.close()


def test_a_role_set_runs_workflows_end_to_end_over_sasl_ssl(env: Env) -> None:
    task = f"{env.prefix}.step"
    flow: dict[str, Any] = {
        "name": "secured.flow",
        "version": 1,
        "tasks": [{"name": task, "taskReferenceName": "step", "type": "SIMPLE"}],
    }
    env.push(flow, [{"name": task}])  # as admin: definitions are an operator's
    worker = Role(env, "worker", argv=["worker", "--noop", "--types", task])
    try:
        with roles(env, "decider", "dispatcher"):
            upstream = bootstrap.as_principal(env.settings, "upstream")
            with CommandClient(upstream) as client:
                ids = [s.workflow_id for s in client.submit_many("secured.flow", [{}] * WORKFLOWS)]

            def completed() -> int:
                events = read_partitions(env.kafka, env.topics.events, range(env.partitions))
                return sum(
                    1
                    for m in events
                    if b'"workflow.completed"' in (m.value() or b"")
                    and (m.key() or b"").decode() in ids
                )

            wait_until(lambda: completed() == WORKFLOWS, 120, "the workflows over SASL_SSL")
    finally:
        worker.stop()
    log = worker.text()
    assert "Authorization" not in log and "authorization" not in log, log[-2000:]


def test_the_broker_refuses_what_least_privilege_forbids(env: Env) -> None:
    t = env.topics
    matrix: list[tuple[str, str, str, str]] = []

    def expect(principal: str, op: str, topic: str, allowed: bool) -> None:
        conn = as_principal(env, principal)
        err = write(conn, topic) if op == "write" else read(conn, topic)
        seen = "allowed" if err is None else ("denied" if err.code() in DENIED else str(err))
        matrix.append((principal, topic.removeprefix(env.prefix + "."), op, seen))
        assert seen == ("allowed" if allowed else "denied"), (principal, op, topic, err)

    expect("worker-default", "write", t.task_results, allowed=True)
    expect("worker-default", "write", t.commands, allowed=False)
    expect("worker-default", "read", t.assignments, allowed=True)
    expect("worker-gpu", "read", t.assignments, allowed=False)
    expect("upstream", "write", t.commands, allowed=True)
    expect("upstream", "read", t.events, allowed=False)
    expect("projector", "read", t.events, allowed=True)
    expect("projector", "write", t.events, allowed=False)
    expect("api", "write", t.commands, allowed=True)
    expect("api", "write", t.events, allowed=False)
    expect("analytics", "write", t.commands, allowed=False)

    table = "\n".join(f"{p:15} {op:5} {topic:15} {seen}" for p, topic, op, seen in matrix)
    out = Path(tempfile.gettempdir()) / "es-sched-test-roles" / "acl_matrix.txt"
    out.write_text(table + "\n")
    print(f"\n{table}")

    admin = bootstrap.as_principal(env.settings, "admin")
    report = check(read_log(admin), False, bootstrap.script_engine())
    assert report.ok, "\n".join(v.line() for v in report.violations[:20])
