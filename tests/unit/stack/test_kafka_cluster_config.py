"""The three-node local Kafka and the replication every es-sched topic is created with and
required to have (ADR 20), decided before any process starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from es_sched.errors import ConfigError, StackError
from es_sched.kafka.topics import Topics, _under_replicated
from es_sched.settings import load_settings
from es_sched.stack.kafka import LocalKafka, server_properties
from es_sched.stack.manager import ServiceStatus, Stack


def _props(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if line and line[0] != "#")


def test_three_nodes_are_three_voters_with_replication_3_and_min_isr_2() -> None:
    nodes = [_props(server_properties(19130, 19131, f"/d{i}", i, 3)) for i in (1, 2, 3)]
    voters = "1@127.0.0.1:19131,2@127.0.0.1:19133,3@127.0.0.1:19135"
    assert {n["controller.quorum.voters"] for n in nodes} == {voters}
    assert [n["node.id"] for n in nodes] == ["1", "2", "3"]
    assert nodes[2]["listeners"] == "PLAINTEXT://127.0.0.1:19134,CONTROLLER://127.0.0.1:19135"
    assert nodes[2]["advertised.listeners"] == "PLAINTEXT://127.0.0.1:19134"
    for n in nodes:  # es-sched's topics (broker defaults) and Kafka's own survive one loss
        for key in (
            "default.replication.factor",
            "offsets.topic.replication.factor",
            "transaction.state.log.replication.factor",
        ):
            assert n[key] == "3", key
        assert n["min.insync.replicas"] == n["transaction.state.log.min.isr"] == "2"


def test_a_single_node_keeps_its_folders_and_one_replica() -> None:
    props = _props(server_properties(9092, 9093, "/d"))
    assert props["default.replication.factor"] == props["min.insync.replicas"] == "1"


def test_node_i_listens_two_ports_up_in_its_own_folders(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("ES_SCHED_STACK_STATE_DIR", str(tmp_path))
    monkeypatch.setenv("ES_SCHED_KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:19130")
    s = load_settings()
    first, third = LocalKafka(s, 1, 3), LocalKafka(s, 3, 3)
    assert (first.endpoint.port, third.endpoint.port) == (19130, 19134)
    assert first.home == tmp_path / "kafka" and third.home == tmp_path / "kafka-3"
    assert third.owned.pid_file == tmp_path / "pids" / "kafka-3.pid"
    assert first.marker != third.marker
    assert first._cluster_id() == third._cluster_id()  # one cluster id for every node


def test_a_formatted_cluster_is_never_resized(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("ES_SCHED_STACK_STATE_DIR", str(tmp_path))
    assert len(Stack(load_settings(), ("kafka",), 3).nodes["kafka"]) == 3
    (tmp_path / "kafka-brokers").write_text("3\n")  # what `stack up --kafka-brokers 3` records
    assert len(Stack(load_settings(), ("kafka",)).nodes["kafka"]) == 3  # status, down
    with pytest.raises(StackError, match="formatted with 3 broker"):
        Stack(load_settings(), ("kafka",), 1)


def test_min_insync_cannot_exceed_the_replication_factor(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ES_SCHED_KAFKA_REPLICATION_FACTOR", "2")
    monkeypatch.setenv("ES_SCHED_KAFKA_MIN_INSYNC_REPLICAS", "3")
    with pytest.raises(ConfigError, match="exceeds replication_factor"):
        load_settings()


def test_every_topic_is_created_with_the_min_insync_setting() -> None:
    topics = Topics("p", 4, replication_factor=3, min_insync_replicas=2)
    assert {t.config.get("min.insync.replicas") for t in topics.all()} == {"2"}
    assert all("min.insync.replicas" not in t.config for t in Topics("p", 4).all())


class _Part:
    def __init__(self, replicas: list[int]) -> None:
        self.replicas = replicas


class _Meta:
    def __init__(self, *replicas: list[int]) -> None:
        self.partitions = {i: _Part(r) for i, r in enumerate(replicas)}


class _Entry:
    def __init__(self, value: str) -> None:
        self.value = value


def test_a_topic_below_the_required_replication_is_refused() -> None:
    (events,) = [t for t in Topics("p", 2, min_insync_replicas=2).all() if t.name == "p.events"]
    ok = {"min.insync.replicas": _Entry("2")}
    assert _under_replicated(events, _Meta([1, 2, 3], [2, 3, 1]), ok, 3) == []
    assert _under_replicated(events, _Meta([1, 2, 3], [2]), ok, 3) == [
        "p.events has 1 replicas, es-sched needs 3"
    ]
    low = {"min.insync.replicas": _Entry("1")}
    assert _under_replicated(events, _Meta([1, 2, 3]), low, None) == [
        "p.events has min.insync.replicas=1, es-sched needs 2"
    ]


def _node(name: str, healthy: bool, managed: str = "local") -> ServiceStatus:
    detail = "3 broker(s)" if healthy else "metadata lists 2 of 3 broker(s)"
    return ServiceStatus("kafka", name, "127.0.0.1:1", healthy, detail, managed)  # type: ignore[arg-type]


def test_up_returns_once_every_node_of_ours_is_healthy_at_the_same_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A node already running saw 2 of 3 brokers just after the two restarted ones were ready;
    ``up`` reports the cluster once it has settled, not that moment."""
    stack = Stack(load_settings(), ("kafka",))
    views = iter(
        [
            [_node("kafka", True), _node("kafka-2", False), _node("kafka-3", True)],
            [_node("kafka", True), _node("kafka-2", True), _node("kafka-3", True)],
        ]
    )
    calls: list[list[ServiceStatus]] = []

    def status() -> list[ServiceStatus]:
        calls.append(next(views))
        return calls[-1]

    monkeypatch.setattr(stack, "status", status)
    monkeypatch.setattr("es_sched.stack.manager.time.sleep", lambda s: None)
    assert all(s.healthy for s in stack._settled())
    assert len(calls) == 2


def test_up_does_not_wait_for_an_endpoint_it_does_not_manage(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stack = Stack(load_settings(), ("kafka",))
    external = [_node("kafka", False, "external")]
    monkeypatch.setattr(stack, "status", lambda: external)
    assert stack._settled() == external
