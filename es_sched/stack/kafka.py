"""Apache Kafka 4.1 as combined broker+controller KRaft nodes, assembled from Maven Central.

One node by default (``make demo``): transactions work on it because every internal topic
(consumer offsets, transaction state, share-coordinator state) is created with replication
factor 1 and min ISR 1. ``stack up --kafka-brokers 3`` runs three such nodes, all of them
controller voters (ADR 20): replication factor 3 and ``min.insync.replicas=2`` for every topic
by default, so one node may die with nothing acknowledged lost and nothing stopping, and a
second death stops writes instead of losing them. Node ``i`` listens on the bootstrap port
``+ 2(i-1)`` and the controller port ``+ 2(i-1)``; node 1 keeps the single node's folders
(``kafka/``, ``logs/kafka.log``, ``pids/kafka.pid``), node i uses ``kafka-i``. Storage is
formatted once, on the first start of a state folder, with one cluster id for all nodes.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from es_sched.errors import StackError
from es_sched.kafka.connection import KafkaConnection, connection
from es_sched.settings import Settings
from es_sched.stack import probes, process
from es_sched.stack.base import (
    Endpoint,
    LocalService,
    java_command,
    maven_copy_dependencies,
    resource_text,
)
from es_sched.stack.kafka_security import LocalSecurity
from es_sched.stack.probes import Probe

# The lines below that make the local nodes one cluster: not the operator's to replace.
CLUSTER_KEYS = frozenset(
    {
        "process.roles",
        "node.id",
        "controller.quorum.voters",
        "listeners",
        "advertised.listeners",
        "controller.listener.names",
        "inter.broker.listener.name",
        "listener.security.protocol.map",
        "log.dirs",
    }
)


def server_properties(
    port: int,
    controller_port: int,
    log_dir: str,
    node: int = 1,
    nodes: int = 1,
    extra: Mapping[str, str] | None = None,
    secured: Mapping[str, str] | None = None,
) -> str:
    """Node ``node`` of ``nodes``; ``port`` and ``controller_port`` are node 1's. ``extra``
    (``ES_SCHED_STACK_KAFKA_PROPERTIES``) replaces a default below or is appended; ``secured``
    (``LocalSecurity.broker_lines``, ADR 73) replaces the plaintext listeners."""
    me, ctl = port + 2 * (node - 1), controller_port + 2 * (node - 1)
    voters = ",".join(f"{i}@127.0.0.1:{controller_port + 2 * (i - 1)}" for i in range(1, nodes + 1))
    rf, isr = min(3, nodes), 2 if nodes >= 3 else 1
    taken = sorted(set(extra or {}) & CLUSTER_KEYS)
    if taken:
        raise StackError(f"ES_SCHED_STACK_KAFKA_PROPERTIES: {', '.join(taken)} is the stack's own")
    lines = [
        "process.roles=broker,controller",
        f"node.id={node}",
        f"controller.quorum.voters={voters}",
        f"listeners=PLAINTEXT://127.0.0.1:{me},CONTROLLER://127.0.0.1:{ctl}",
        f"advertised.listeners=PLAINTEXT://127.0.0.1:{me}",
        "controller.listener.names=CONTROLLER",
        "inter.broker.listener.name=PLAINTEXT",
        "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        f"log.dirs={log_dir}",
        "num.partitions=1",
        # es-sched creates every topic it uses at start-up; a typo must fail, not create.
        "auto.create.topics.enable=false",
        # Every topic, es-sched's and Kafka's own, survives the loss of one node of three.
        f"default.replication.factor={rf}",
        f"min.insync.replicas={isr}",
        f"offsets.topic.replication.factor={rf}",
        f"transaction.state.log.replication.factor={rf}",
        f"transaction.state.log.min.isr={isr}",
        f"share.coordinator.state.topic.replication.factor={rf}",
        f"share.coordinator.state.topic.min.isr={isr}",
        "group.initial.rebalance.delay.ms=0",
    ]
    more = {**(secured or {}), **(extra or {})}
    for i, line in enumerate(lines):
        key = line.split("=", 1)[0]
        if key in more:
            lines[i] = f"{key}={more.pop(key)}"
    lines += [f"{key}={value}" for key, value in more.items()]
    return "\n".join([*lines, ""])


def new_cluster_id() -> str:
    """16 random bytes as URL-safe base64 without padding, like Kafka's ``Uuid.randomUuid``.

    An id starting with ``-`` would be read as an option by the storage tool (Kafka's own
    generator redraws those too).
    """
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


class LocalKafka(LocalService):
    """Node ``node`` of a local cluster of ``nodes`` (one by default)."""

    def __init__(self, settings: Settings, node: int = 1, nodes: int = 1) -> None:
        self.node, self.nodes = node, nodes
        self.name = "kafka" if node == 1 else f"kafka-{node}"
        super().__init__(settings)
        secured = settings.stack.kafka_security == "sasl_ssl"
        self.security = LocalSecurity(settings) if secured else None

    @property
    def endpoint(self) -> Endpoint:
        first = self.settings.kafka.bootstrap_servers.split(",")[0].strip()
        host, _, port = first.rpartition(":")
        return Endpoint(host, int(port) + 2 * (self.node - 1))

    @property
    def display_endpoint(self) -> str:
        return self.settings.kafka.bootstrap_servers if self.node == 1 else str(self.endpoint)

    @property
    def cluster_id_file(self) -> Path:
        """Node 1's folder keeps the id every node of the cluster is formatted with."""
        return self.state_dir / "kafka" / "cluster-id"

    @property
    def marker(self) -> str:
        return str(self.home / "server.properties")

    def install(self) -> None:
        maven_copy_dependencies("kafka-pom.xml", self.cache_dir / "kafka")

    def start(self) -> int:
        lib = maven_copy_dependencies("kafka-pom.xml", self.cache_dir / "kafka")
        data = self.home / "data"
        data.mkdir(parents=True, exist_ok=True)
        props = self.home / "server.properties"
        first_port = self.endpoint.port - 2 * (self.node - 1)
        controller = self.settings.stack.kafka_controller_port
        secured = None
        if self.security is not None:
            self.security.prepare()
            ctl = controller + 2 * (self.node - 1)
            secured = self.security.broker_lines(self.endpoint.port, ctl)
        text = server_properties(
            first_port,
            controller,
            str(data),
            self.node,
            self.nodes,
            self.settings.stack.kafka_properties,
            secured,
        )
        props.touch(0o600)  # the secured broker's file holds the admin's password
        props.write_text(text)
        log4j = self.home / "log4j2.properties"
        log4j.write_text(resource_text("kafka-log4j2.properties"))
        heap = self.settings.stack.kafka_heap
        jvm_log = f"-Dlog4j2.configurationFile={log4j}"
        if not (data / "meta.properties").exists():
            cluster_id = self._cluster_id()
            fmt = java_command(
                "256m",
                lib,
                "kafka.tools.StorageTool",
                "format",
                "-t",
                cluster_id,
                "-c",
                str(props),
                "--ignore-formatted",
                *(self.security.format_args() if self.security is not None else []),
            )
            fmt.insert(1, jvm_log)
            process.run(fmt, what="formatting Kafka KRaft storage", timeout_s=120)
        cmd = java_command(heap, lib, "kafka.Kafka", str(props))
        cmd.insert(1, jvm_log)
        pid = process.spawn(cmd, self.log_file)
        self.owned.record(pid)
        return pid

    def _cluster_id(self) -> str:
        if not self.cluster_id_file.exists():
            self.cluster_id_file.parent.mkdir(parents=True, exist_ok=True)
            self.cluster_id_file.write_text(new_cluster_id() + "\n")
        return self.cluster_id_file.read_text().strip()

    @property
    def admin(self) -> KafkaConnection:
        """The stack's own way in: the admin principal of a secured broker (from the state
        folder's files, whatever the clients' settings say), else plaintext."""
        if self.security is not None:
            return self.security.admin(str(self.endpoint))
        return replace(
            connection(self.settings.kafka, "admin"), bootstrap_servers=str(self.endpoint)
        )

    def server_probe(self) -> Probe:
        """This node answers, and its metadata lists every node of the cluster."""
        return probes.kafka(self.admin, brokers=self.nodes)

    def probe(self) -> Probe:
        """The server, and on a secured broker its users and the topic prefix's ACLs (what
        ``after_ready`` makes): until then no role could get in."""
        server = self.server_probe()
        if not server.healthy or self.security is None:
            return server
        missing = self.security.missing(self.admin)
        return Probe(False, missing) if missing else server

    def after_ready(self) -> None:
        """The secured broker's users and ACLs (node 1 makes them for the cluster)."""
        if self.security is not None and self.node == 1:
            self.security.after_ready(self.admin)
