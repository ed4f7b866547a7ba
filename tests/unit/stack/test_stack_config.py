"""What the local stack writes and decides before any process starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from es_sched.errors import ConfigError, StackError
from es_sched.settings import load_settings
from es_sched.stack.base import Endpoint
from es_sched.stack.kafka import LocalKafka, new_cluster_id, server_properties
from es_sched.stack.opensearch import OPENSEARCH_YML, LocalOpenSearch
from es_sched.stack.postgres import LocalPostgres, find_bin_dir


def _props(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if line and line[0] != "#")


def test_kafka_single_node_supports_transactions() -> None:
    props = _props(server_properties(19092, 19093, "/data/k"))
    assert props["process.roles"] == "broker,controller"
    assert props["controller.quorum.voters"] == "1@127.0.0.1:19093"
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093"
    # A single broker can only host internal topics with one replica and min ISR 1.
    for key in (
        "offsets.topic.replication.factor",
        "transaction.state.log.replication.factor",
        "transaction.state.log.min.isr",
        "share.coordinator.state.topic.replication.factor",
        "share.coordinator.state.topic.min.isr",
    ):
        assert props[key] == "1", key
    assert props["group.initial.rebalance.delay.ms"] == "0"
    assert props["log.dirs"] == "/data/k"


def test_opensearch_config_is_single_node_loopback_without_disk_thresholds() -> None:
    assert "discovery.type: single-node" in OPENSEARCH_YML
    assert "network.host: 127.0.0.1" in OPENSEARCH_YML
    assert "cluster.routing.allocation.disk.threshold_enabled: false" in OPENSEARCH_YML


def test_services_take_ports_and_files_from_settings(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("ES_SCHED_STACK_STATE_DIR", str(tmp_path))
    monkeypatch.setenv("ES_SCHED_KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:29092")
    monkeypatch.setenv("ES_SCHED_PG_URL", "postgresql+psycopg://a:b@db.example:5999/x")
    monkeypatch.setenv("ES_SCHED_SEARCH_URL", "http://localhost:29200")
    s = load_settings()
    kafka, pg, search = LocalKafka(s), LocalPostgres(s), LocalOpenSearch(s)
    assert kafka.endpoint == Endpoint("127.0.0.1", 29092) and kafka.endpoint.is_local
    assert not pg.endpoint.is_local  # a remote database is never started or stopped by us
    assert search.endpoint == Endpoint("localhost", 29200)
    assert kafka.log_file == tmp_path / "logs" / "kafka.log"
    assert kafka.owned.pid_file == tmp_path / "pids" / "kafka.pid"
    # Markers tie a PID to this state folder, so two checkouts never stop each other's services.
    assert str(tmp_path) in kafka.marker
    assert str(tmp_path) in pg.marker
    assert str(tmp_path) in search.marker


def test_find_bin_dir_prefers_the_newest_postgres(tmp_path: Path) -> None:
    assert find_bin_dir(tmp_path) is None
    for major in ("13", "15", "9"):
        (tmp_path / major / "bin").mkdir(parents=True)
        (tmp_path / major / "bin" / "pg_ctl").touch()
    assert find_bin_dir(tmp_path) == tmp_path / "15" / "bin"


def test_local_opensearch_refuses_a_port_the_runner_cannot_take(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("ES_SCHED_STACK_STATE_DIR", str(tmp_path))
    monkeypatch.setenv("ES_SCHED_SEARCH_URL", "http://127.0.0.1:39200")
    with pytest.raises(StackError, match="up to 9299"):
        LocalOpenSearch(load_settings()).start()
    assert not (tmp_path / "pids" / "opensearch.pid").exists()


def test_cluster_ids_are_22_url_safe_characters_never_read_as_an_option() -> None:
    ids = {new_cluster_id() for _ in range(2000)}  # ~31 of 2000 draws would start with "-"
    assert len(ids) == 2000
    assert all(len(i) == 22 and not i.startswith("-") for i in ids)
    assert all(
        set(i) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
        for i in ids
    )


def test_kafka_properties_from_the_environment_replace_a_default_or_are_appended(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    value = '{"num.io.threads": "2", "num.partitions": "3"}'
    monkeypatch.setenv("ES_SCHED_STACK_KAFKA_PROPERTIES", value)
    extra = load_settings().stack.kafka_properties
    text = server_properties(19092, 19093, "/data/k", extra=extra)
    props = _props(text)
    assert props["num.io.threads"] == "2" and props["num.partitions"] == "3"
    assert text.count("num.partitions=") == 1  # replaced where it was, not repeated
    assert props["log.dirs"] == "/data/k"  # the rest as before


@pytest.mark.parametrize(
    "value", ['{"a=b": "1"}', '{"num.io.threads": "2\\nlog.dirs=/x"}', '{" ": "1"}']
)
def test_kafka_properties_that_would_break_the_file_are_refused_at_start_up(
    value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ES_SCHED_STACK_KAFKA_PROPERTIES", value)
    with pytest.raises(ConfigError, match="ES_SCHED_STACK_KAFKA_PROPERTIES") as err:
        load_settings()
    assert "not a server.properties key and value" in str(err.value)


def test_kafka_properties_the_stack_owns_are_refused_naming_the_variable() -> None:
    with pytest.raises(StackError, match=r"ES_SCHED_STACK_KAFKA_PROPERTIES: log\.dirs") as err:
        server_properties(19092, 19093, "/data/k", extra={"log.dirs": "/elsewhere"})
    assert "the stack's own" in str(err.value)
