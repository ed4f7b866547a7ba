"""ADR 72: the one rule from ``KafkaSettings`` to client configuration, per principal."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import SecretStr, ValidationError

from es_sched import bootstrap
from es_sched.errors import ConfigError
from es_sched.kafka.clients import producer_config
from es_sched.kafka.connection import KafkaConnection, connection
from es_sched.settings import KafkaSettings, PostgresSettings, SearchSettings
from testkit.settings import settings_with

pytestmark = pytest.mark.unit

SECRET = "s3cret-do-not-show"


def scram(**extra: object) -> KafkaSettings:
    return KafkaSettings(
        bootstrap_servers="b1:9094,b2:9094",
        security_protocol="SASL_SSL",
        ssl_ca_location=Path("/ca.pem"),
        **extra,  # type: ignore[arg-type]
    )


def test_plaintext_is_the_servers_alone() -> None:
    conn = connection(KafkaSettings(bootstrap_servers="b:1", security_protocol="PLAINTEXT"))
    assert conn.config() == {"bootstrap.servers": "b:1"}
    assert producer_config(conn)["bootstrap.servers"] == "b:1"


def test_sasl_ssl_reaches_every_client_config_and_no_text_shows_the_password() -> None:
    conn = connection(scram(sasl_username="decider", sasl_password=SecretStr(SECRET)))
    config = producer_config(conn, "tx-1")
    assert config["security.protocol"] == "SASL_SSL"
    assert config["sasl.mechanism"] == "SCRAM-SHA-512"
    assert (config["sasl.username"], config["sasl.password"]) == ("decider", SECRET)
    assert config["ssl.ca.location"] == "/ca.pem"
    assert config["transactional.id"] == "tx-1"
    for text in (str(conn), repr(conn), str(conn.shown()), repr(scram(sasl_username="u"))):
        assert SECRET not in text
    assert str(conn) == "b1:9094,b2:9094"  # what error messages say: "at {connection}"
    assert conn.shown()["sasl.password"] == "***"


def test_each_principal_reads_its_own_file_and_others_fall_back(tmp_path: Path) -> None:
    (tmp_path / "decider").write_text("es-decider:pw-of-decider\n")
    (tmp_path / "worker-gpu").write_text("es-worker-gpu:pw:with:colons")
    base = scram(credentials_dir=tmp_path, sasl_username="fallback", sasl_password=SecretStr("f"))
    keys = {p: connection(base, p).config() for p in ("decider", "worker-gpu", "api")}
    assert (keys["decider"]["sasl.username"], keys["decider"]["sasl.password"]) == (
        "es-decider",
        "pw-of-decider",
    )
    assert keys["worker-gpu"]["sasl.password"] == "pw:with:colons"
    assert keys["api"]["sasl.username"] == "fallback"
    assert connection(base, "decider").principal == "decider"


def test_a_password_file_is_read_when_the_client_is_made(tmp_path: Path) -> None:
    secret = tmp_path / "pw"
    secret.write_text("first\n")
    settings = scram(sasl_username="u", sasl_password_file=secret)
    assert connection(settings).config()["sasl.password"] == "first"
    secret.write_text("rotated")
    assert connection(settings).config()["sasl.password"] == "rotated"


def test_an_unreadable_or_malformed_credentials_file_names_the_file_not_its_content(
    tmp_path: Path,
) -> None:
    with pytest.raises(ConfigError, match="cannot read the secret file"):
        connection(scram(sasl_username="u", sasl_password_file=tmp_path / "missing"))
    (tmp_path / "api").write_text(SECRET)  # no "username:" part
    with pytest.raises(ConfigError, match="username:password") as caught:
        connection(scram(credentials_dir=tmp_path), "api")
    assert SECRET not in str(caught.value)


def test_oauthbearer_asks_the_oidc_token_endpoint() -> None:
    conn = connection(
        scram(
            sasl_mechanism="OAUTHBEARER",
            oauth_token_endpoint_url="https://idp/token",
            oauth_client_id="es-sched",
            oauth_client_secret=SecretStr(SECRET),
            oauth_scope="kafka",
        )
    )
    config = conn.config()
    assert config["sasl.oauthbearer.method"] == "oidc"
    assert config["sasl.oauthbearer.client.secret"] == SECRET
    assert config["sasl.oauthbearer.scope"] == "kafka"
    assert "sasl.username" not in config
    assert SECRET not in repr(conn)


def test_sasl_without_any_credentials_is_refused_at_start_up() -> None:
    with pytest.raises(ValidationError, match="needs sasl_username or credentials_dir"):
        KafkaSettings(security_protocol="SASL_SSL")
    with pytest.raises(ValidationError, match="OAUTHBEARER needs"):
        KafkaSettings(security_protocol="SASL_SSL", sasl_mechanism="OAUTHBEARER")


def test_mtls_without_sasl_sends_the_client_certificate() -> None:
    settings = KafkaSettings(
        security_protocol="SSL",
        ssl_ca_location=Path("/ca.pem"),
        ssl_certificate_location=Path("/me.pem"),
        ssl_key_location=Path("/me.key"),
        ssl_key_password=SecretStr(SECRET),
    )
    config = connection(settings).config()
    assert config["ssl.certificate.location"] == "/me.pem"
    assert config["ssl.key.password"] == SECRET
    assert "sasl.mechanism" not in config


def test_each_role_of_es_sched_run_gets_its_own_principal() -> None:
    base = settings_with({})
    principals = {r: bootstrap.as_principal(base, r).kafka.principal for r in bootstrap.ROLES}
    assert principals["retry"] == "retry-relay"
    assert principals["projector-pg"] == principals["projector-search"] == "projector"
    assert len(set(principals.values())) == len(bootstrap.ROLES) - 1
    assert base.kafka.principal == ""  # the original is left as it was


def test_the_plaintext_shortcut_carries_no_security() -> None:
    assert KafkaConnection.plaintext("b:1").config(**{"group.id": "g"}) == {
        "bootstrap.servers": "b:1",
        "group.id": "g",
    }


def test_postgres_tls_parameters_reach_every_url() -> None:
    pg = PostgresSettings(
        url="postgresql+psycopg://u:p@db:5432/es?application_name=x",
        sslmode="verify-full",
        sslrootcert=Path("/ca.pem"),
    )
    assert pg.engine_url.endswith("?application_name=x&sslmode=verify-full&sslrootcert=%2Fca.pem")
    assert pg.libpq_dsn.startswith("postgresql://u:p@db:5432/es?")
    assert "sslmode=verify-full" in pg.libpq_dsn
    assert PostgresSettings(url="postgresql://u@db/es").engine_url == "postgresql://u@db/es"


def test_search_credentials_in_the_form_each_flavour_takes() -> None:
    from es_sched.projections.search.client import access  # noqa: PLC0415

    basic = SearchSettings(username="es", password=SecretStr(SECRET), ca_certs=Path("/ca.pem"))
    assert access(basic) == {
        "http_auth": ("es", SECRET),
        "ca_certs": "/ca.pem",
        "verify_certs": True,
    }
    keyed = SearchSettings(flavor="elasticsearch", api_key=SecretStr("a2V5"))
    assert access(keyed) == {"api_key": "a2V5"}
    assert SECRET not in repr(basic)
    with pytest.raises(ValidationError, match="not both"):
        SearchSettings(username="es", api_key=SecretStr("k"))


def test_the_read_only_role_is_what_api_and_cli_queries_use() -> None:
    writer = "postgresql+psycopg://w:wp@db/es"
    pg = PostgresSettings(url=writer, read_url="postgresql+psycopg://r:rp@db/es")
    assert (pg.for_reading().user, pg.for_reading().password) == ("r", "rp")
    assert PostgresSettings(url=writer).for_reading().user == "w"  # none set: the writer
    reading = bootstrap.reader(settings_with({"ES_SCHED_PG_READ_URL": pg.read_url}))
    assert reading.postgres.user == "r"
    with pytest.raises(ValidationError, match="postgresql"):
        PostgresSettings(read_url="mysql://r@db/es")
