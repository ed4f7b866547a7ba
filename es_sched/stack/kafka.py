"""Apache Kafka 4.1 as one combined broker+controller KRaft node, assembled from Maven Central.

Transactions work on this single node because every internal topic (consumer offsets,
transaction state, share-coordinator state) is created with replication factor 1 and min ISR 1.
Storage is formatted once, on the first start of a state folder.
"""

from __future__ import annotations

import base64
import uuid

from es_sched.stack import probes, process
from es_sched.stack.base import (
    Endpoint,
    LocalService,
    java_command,
    maven_copy_dependencies,
    resource_text,
)
from es_sched.stack.probes import Probe


def server_properties(port: int, controller_port: int, log_dir: str) -> str:
    return "\n".join(
        [
            "process.roles=broker,controller",
            "node.id=1",
            f"controller.quorum.voters=1@127.0.0.1:{controller_port}",
            f"listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
            f"advertised.listeners=PLAINTEXT://127.0.0.1:{port}",
            "controller.listener.names=CONTROLLER",
            "inter.broker.listener.name=PLAINTEXT",
            "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            f"log.dirs={log_dir}",
            "num.partitions=1",
            # es-sched creates every topic it uses at start-up; a typo must fail, not create.
            "auto.create.topics.enable=false",
            "offsets.topic.replication.factor=1",
            "transaction.state.log.replication.factor=1",
            "transaction.state.log.min.isr=1",
            "share.coordinator.state.topic.replication.factor=1",
            "share.coordinator.state.topic.min.isr=1",
            "group.initial.rebalance.delay.ms=0",
            "",
        ]
    )


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
    name = "kafka"

    @property
    def endpoint(self) -> Endpoint:
        first = self.settings.kafka.bootstrap_servers.split(",")[0].strip()
        host, _, port = first.rpartition(":")
        return Endpoint(host, int(port))

    @property
    def display_endpoint(self) -> str:
        return self.settings.kafka.bootstrap_servers

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
        props.write_text(
            server_properties(
                self.endpoint.port, self.settings.stack.kafka_controller_port, str(data)
            )
        )
        log4j = self.home / "log4j2.properties"
        log4j.write_text(resource_text("kafka-log4j2.properties"))
        heap = self.settings.stack.kafka_heap
        jvm_log = f"-Dlog4j2.configurationFile={log4j}"
        if not (data / "meta.properties").exists():
            cluster_id = new_cluster_id()
            fmt = java_command(
                "256m", lib, "kafka.tools.StorageTool", "format", "-t", cluster_id,
                "-c", str(props), "--ignore-formatted",
            )  # fmt: skip
            fmt.insert(1, jvm_log)
            process.run(fmt, what="formatting Kafka KRaft storage", timeout_s=120)
        cmd = java_command(heap, lib, "kafka.Kafka", str(props))
        cmd.insert(1, jvm_log)
        pid = process.spawn(cmd, self.log_file)
        self.owned.record(pid)
        return pid

    def probe(self) -> Probe:
        return probes.kafka(self.settings.kafka.bootstrap_servers)
