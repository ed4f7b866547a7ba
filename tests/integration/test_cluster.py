"""A three-node Kafka loses one node under load, then a second: work goes on, then writes block
with nothing acknowledged lost, and after both return every workflow completes.

The cluster is the operator's: ``es-sched stack up --kafka-brokers 3`` on private ports and a
private state folder (private_cluster.py), every es-sched topic with replication factor 3 and
``min.insync.replicas=2`` (required by ES_SCHED_KAFKA_REPLICATION_FACTOR / MIN_INSYNC_REPLICAS).
``es-sched run`` (decider, timers, retry relay, dispatcher) and one ``es-sched worker --noop``
run against it with 150 media workflows in flight (20 more are submitted during the outage);
none of them is restarted.

The first victim is the node leading the worker's assignment partition: that is the loss
that stalled the worker in 1 run of 6 (its group-less "end of partition" client kept asking the
dead leader, its cached metadata never refreshed, so no task started again; see
``AssignmentReader.end``). Choosing it every time makes the test hit that case every run.

What proves each fault fired: after the first kill -9 the node's pid is gone, the metadata
lists 2 brokers and every events and assignments partition's ISR has shrunk to the two live
nodes with a live leader. After the second kill -9 the controller quorum (3 voters) and the
ISR minimum are both lost: a user's submission made then is not acknowledged until the nodes
are back (its flush returns only after ``stack up`` restarted them). The end is checked on the
log: exactly the acknowledged workflows exist, each with one ``workflow.started``, seq 1..n, no
event twice.
"""

from __future__ import annotations

import re
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._config import ConfigResource  # not re-exported for mypy
from confluent_kafka.admin._resource import ResourceType

from es_sched.commands import CommandClient, Submitted
from es_sched.kafka.topics import assignment_topic
from testkit.fault_report import Row, record
from testkit.runtime import (
    MEDIA,
    Env,
    Role,
    assert_log_invariants,
    completed,
    describe_stall,
    final_status,
    media_inputs,
    read_events,
)
from testkit.wait import wait_until
from tests.integration.private_cluster import NODES, PrivateCluster

pytestmark = [
    pytest.mark.fault,
    pytest.mark.integration,
    pytest.mark.cluster,
]
WORKFLOWS, LATE = 150, 20
TYPES = "media.probe,media.transcode,media.thumbnail,media.package,media.write_asset,media.callback"
ROLES = ["run", *(a for r in ("decider", "timers", "retry", "dispatcher") for a in ("--role", r))]
WORKER = ["worker", "--noop", "--types", TYPES, "--concurrency", "8", "--heartbeat-s", "1"]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[PrivateCluster]:
    if shutil.which("java") is None or shutil.which("mvn") is None:
        pytest.skip("a private cluster needs java and mvn (the local stack's Kafka build)")
    c = PrivateCluster(tmp_path / "state")
    try:
        _err, took = c.up("--kafka-brokers", "3")
        print(f"\n[cluster] stack up --kafka-brokers 3: {took:.1f}s")
        yield c
    finally:
        c.down()


def tasks_completed(env: Env) -> int:
    return sum(e.type == "task.completed" for v in read_events(env).values() for e in v)


def shrunk_to_survivors(cluster: PrivateCluster, dead: int, *topics: str) -> bool:
    """2 brokers listed, and every partition led by a live node with ``dead`` out of its ISR."""
    try:
        meta = cluster.metadata()
    except KafkaException:
        return False
    parts = [p for t in topics for p in meta.topics[t].partitions.values()]
    return len(meta.brokers) == 2 and all(
        p.leader not in (-1, dead) and dead not in p.isrs and len(p.isrs) == 2 for p in parts
    )


def in_flight(env: Env) -> int:
    """Workflows started and not ended, as the events topic has them now."""
    return sum(final_status(v) == "RUNNING" for v in read_events(env).values())


def replicated(cluster: PrivateCluster, env: Env) -> bool:
    """Every es-sched topic listed with 3 replicas in sync and min.insync.replicas=2 (a topic
    created a moment ago may not be in every node's metadata yet)."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    meta = admin.list_topics(timeout=10).topics
    names = [t.name for t in env.topics.all()]
    if any(
        name not in meta
        or {(len(p.replicas), len(p.isrs)) for p in meta[name].partitions.values()} != {(3, 3)}
        for name in names
    ):
        return False
    resources = [ConfigResource(ResourceType.TOPIC, n) for n in names]
    try:
        return all(
            f.result(timeout=10)["min.insync.replicas"].value == "2"
            for f in admin.describe_configs(resources).values()
        )
    except KafkaException as exc:  # the node asked has not learnt of the topic yet
        if exc.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
            return False
        raise


@pytest.mark.timeout(600)  # three JVMs start and two restart; the work itself is ~2 min
def test_a_three_node_cluster_loses_one_node_then_two_and_nothing_acknowledged_is_lost(
    cluster: PrivateCluster,
) -> None:
    doc = cluster.status()
    assert [(doc[n]["healthy"], doc[n]["detail"]) for n in NODES] == [(True, "3 broker(s)")] * 3
    env = Env(
        bootstrap=cluster.bootstrap,
        extra={
            "ES_SCHED_DISPATCH_HEARTBEAT_S": "10",
            "ES_SCHED_DISPATCH_LEASE_K": "4",  # leases of 4 x 10 s outlast the outage
            "ES_SCHED_KAFKA_REPLICATION_FACTOR": "3",
            "ES_SCHED_KAFKA_MIN_INSYNC_REPLICAS": "2",
        },
    )
    env.create()
    print(f"[cluster] topic prefix {env.prefix}")
    wait_until(lambda: replicated(cluster, env), 30, "every topic: 3 replicas, min ISR 2")
    env.push_files(*MEDIA)
    roles, worker = Role(env, "roles", ROLES), Role(env, "worker", WORKER)
    late: list[Submitted] = []
    try:
        roles.wait_log("dispatcher started", 90)
        worker.wait_log("started", 90)
        submitted = {s.workflow_id for s in env.submit("media_pipeline", media_inputs(WORKFLOWS))}

        def stalled(what: str, expected: int = WORKFLOWS) -> Callable[[], str]:
            return lambda: f"{what}; now: " + describe_stall(env, expected, roles, worker)

        wait_until(lambda: tasks_completed(env) >= 100, 120, stalled("100 tasks to complete"))

        # -- one node of three: leaders move, the ISR shrinks, work goes on -----------------
        # The victim leads the worker's assignment partition (named in its "started" line).
        found = re.search(r"started \((\S+)\[(\d+)\]\)", worker.text())
        assert found is not None, worker.text()[-2000:]
        assignments, part = found[1], int(found[2])
        assert assignments == assignment_topic(env.settings.kafka.topic_prefix, "default")
        victim = cluster.metadata().topics[assignments].partitions[part].leader
        running = in_flight(env)
        killed_at = time.monotonic()
        first = cluster.kill(NODES[victim - 1])
        assert running > 0, "the kill must hit workflows in flight"
        wait_until(
            lambda: shrunk_to_survivors(cluster, victim, env.topics.events, assignments),
            60,
            f"2 brokers listed and node {victim} out of every ISR",
        )
        election_s = time.monotonic() - killed_at
        tasks_then = tasks_completed(env)
        wait_until(
            lambda: tasks_completed(env) >= tasks_then + 60,
            120,
            stalled("60 more tasks completed on two nodes"),
        )
        sixty_s = time.monotonic() - killed_at - election_s

        # -- two nodes of three: no quorum, no ISR minimum: writes wait ---------------------
        # The second victim is the node that does not lead the definitions topic, so a user's
        # client still reads its definitions and gets as far as producing its commands.
        leader = cluster.metadata().topics[env.topics.definitions].partitions[0].leader
        second = NODES[({1, 2, 3} - {victim, leader}).pop() - 1]
        client = CommandClient(env.settings, flush_timeout_s=600)
        client.ensure_topics()
        second_at = time.monotonic()
        cluster.kill(second)
        acked_at: list[float] = []

        def submit_late() -> None:
            late.extend(client.submit_many("media_pipeline", media_inputs(LATE, "late")))
            acked_at.append(time.monotonic())

        thread = threading.Thread(target=submit_late, daemon=True)
        thread.start()

        def waiting() -> bool:  # the client's producer holds every late record unacknowledged
            p = client._producer
            return p is not None and len(p) == LATE

        wait_until(waiting, 60, "the late commands produced and waiting for acknowledgement")
        assert not acked_at, "a write was acknowledged with one node of three"

        restart_at = time.monotonic()
        err, restart_s = cluster.up()  # starts exactly the two missing nodes
        assert err.count("started pid") == 2, err
        thread.join(600)
        assert acked_at and acked_at[0] > restart_at, "acknowledged only once the nodes are back"
        blocked_s = acked_at[0] - second_at
        client.close()
        ids = submitted | {s.workflow_id for s in late}
        wait_until(
            lambda: completed(env) == WORKFLOWS + LATE,
            300,
            stalled("every workflow completed", WORKFLOWS + LATE),
        )
        done_s = time.monotonic() - restart_at
        assert roles.proc.poll() is None and worker.proc.poll() is None, "nothing else restarted"
    finally:
        for r in (worker, roles):
            r.stop()
    print(
        f"[cluster] killed node {victim} (pid {first}, leader of {assignments}[{part}]): ISR"
        f" shrunk, leaders moved in {election_s:.1f}s; 60 more tasks {sixty_s:.1f}s later;"
        f" killed {second}: a submission blocked {blocked_s:.1f}s (restart took"
        f" {restart_s:.1f}s); all {len(ids)} completed {done_s:.1f}s after the restart"
    )
    log = roles.log.read_text(errors="replace")
    assert roles.proc.returncode == 0, f"SIGTERM stops the roles cleanly:\n{log[-3000:]}"
    assert "role decider failed" not in log and "role dispatcher failed" not in log
    assert_log_invariants(env, ids)
    assert len(ids) == WORKFLOWS + LATE  # every acknowledged StartWorkflow has its workflow
    record(
        Row(
            fault=f"kill -9 of 1 of 3 Kafka nodes (node {victim}, leader of the worker's "
            f"assignment partition), then of a second node",
            in_flight=running,
            proof=f"pid {first} gone; 2 brokers listed, node {victim} out of every ISR; a "
            f"submission unacknowledged {blocked_s:.0f}s with 1 node of 3",
            invariants=f"I1-I3, I5 clean ({len(ids)} workflows)",
            recovery=f"leaders moved {election_s:.1f}s after the kill; 60 more tasks done "
            f"{sixty_s:.1f}s after the election; all done {done_s:.1f}s after the restart",
        )
    )
