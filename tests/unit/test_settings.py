from __future__ import annotations

import pytest

from es_sched.errors import ConfigError, EsSchedError
from es_sched.settings import load_settings


def test_defaults_point_at_the_local_stack(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("ES_SCHED_KAFKA_BOOTSTRAP_SERVERS", "ES_SCHED_PG_URL", "ES_SCHED_SEARCH_URL"):
        monkeypatch.delenv(var, raising=False)
    s = load_settings()
    assert s.kafka.bootstrap_servers == "127.0.0.1:9092"
    assert (s.postgres.host, s.postgres.port, s.postgres.database) == (
        "127.0.0.1",
        15432,
        "es_sched",
    )
    assert s.search.port == 9200


def test_environment_overrides_and_derived_values(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ES_SCHED_KAFKA_BOOTSTRAP_SERVERS", "k1:19092,k2:19092")
    monkeypatch.setenv("ES_SCHED_PG_URL", "postgresql+psycopg://u:p%40ss@db.internal:6543/sched")
    monkeypatch.setenv("ES_SCHED_SEARCH_URL", "https://search.internal/")
    monkeypatch.setenv("ES_SCHED_SEARCH_FLAVOR", "elasticsearch")
    s = load_settings()
    assert s.kafka.first_port == 19092
    assert (s.postgres.user, s.postgres.port, s.postgres.database) == ("u", 6543, "sched")
    assert s.postgres.libpq_dsn == "postgresql://u:p%40ss@db.internal:6543/sched"
    assert (s.search.url, s.search.port, s.search.flavor) == (
        "https://search.internal",
        443,
        "elasticsearch",
    )


@pytest.mark.parametrize(
    ("var", "value"),
    [
        ("ES_SCHED_KAFKA_BOOTSTRAP_SERVERS", "no-port-here"),
        ("ES_SCHED_PG_URL", "mysql://u@h/db"),
        ("ES_SCHED_SEARCH_FLAVOR", "solr"),
        ("ES_SCHED_STACK_READY_TIMEOUT_S", "-1"),
        ("ES_SCHED_STACK_KAFKA_CONTROLLER_PORT", "70000"),
        ("ES_SCHED_RUN_REQUEUE_AFTER_S", "0"),
    ],
)
def test_a_bad_value_is_refused_naming_its_variable(
    monkeypatch: pytest.MonkeyPatch, var: str, value: str
) -> None:
    monkeypatch.setenv(var, value)
    with pytest.raises(ConfigError) as caught:
        load_settings()
    assert var in str(caught.value)
    assert isinstance(caught.value, EsSchedError)
