"""How a client reaches the brokers: the one rule that turns ``KafkaSettings`` into client
configuration (ADR 72).

``KafkaConnection`` is a small frozen value: the bootstrap servers plus librdkafka's security
keys for one principal. Every function that makes a Kafka client takes one instead of a bare
bootstrap string, so no client can be made without the security configuration, and the
settings are read (and a credentials file opened) once per principal, where the connection is
built, not wherever a client is.

- ``connection(settings)``: the connection of ``settings.principal`` (ADR 72's one principal
  per role; ``es_sched.bootstrap`` sets the principal of each role it builds).
- ``KafkaConnection.config()``: ``bootstrap.servers`` and the security keys, the start of every
  confluent-kafka Producer, Consumer and AdminClient configuration (``kafka/clients.py``).
- ``KafkaConnection.faust_credentials()``: the same for faust's aiokafka clients (analytics).

Secrets stay out of sight: ``str()`` is the bootstrap servers alone (error messages say
"at {connection}"), ``repr()`` names the principal and protocol, never the keys' values.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from typing import Any

from es_sched.errors import ConfigError
from es_sched.settings import KafkaSettings

# The principal of each es-sched role (the names `es-sched stack up` gives the local SCRAM
# users and its ACL file grants to): the two projectors read the same topics, so they share
# one. A worker's is ``worker-<pool>``; ``upstream`` and ``admin`` are for services that only
# submit commands and for operators' CLI.
ROLE_PRINCIPALS = {
    "decider": "decider",
    "timers": "timers",
    "retry": "retry-relay",
    "dispatcher": "dispatcher",
    "projector-pg": "projector",
    "projector-search": "projector",
    "analytics": "analytics",
    "api": "api",
}

# librdkafka keys whose values are secrets: masked wherever a configuration is shown.
SECRET_KEYS = frozenset({"sasl.password", "ssl.key.password", "sasl.oauthbearer.client.secret"})


def worker_principal(pool: str) -> str:
    return f"worker-{pool}"


@dataclass(frozen=True)
class KafkaConnection:
    """The brokers and how to authenticate to them, as one principal."""

    bootstrap_servers: str
    security_protocol: str = "PLAINTEXT"
    principal: str = ""
    # librdkafka keys beyond bootstrap.servers (security.protocol, sasl.*, ssl.*).
    security: tuple[tuple[str, str], ...] = field(default=(), repr=False)

    @classmethod
    def plaintext(cls, bootstrap_servers: str) -> KafkaConnection:
        """An unsecured connection: the local stack's plaintext listener, or a test's."""
        return cls(bootstrap_servers)

    def config(self, **extra: Any) -> dict[str, Any]:
        """A confluent-kafka client configuration: these servers and credentials, then
        ``extra``."""
        return {"bootstrap.servers": self.bootstrap_servers, **dict(self.security), **extra}

    def shown(self) -> dict[str, str]:
        """The configuration as it may be logged: secret values masked."""
        return {
            k: ("***" if k in SECRET_KEYS else v)
            for k, v in (("bootstrap.servers", self.bootstrap_servers), *self.security)
        }

    def faust_credentials(self) -> Any:
        """faust's ``broker_credentials`` (aiokafka under it) for this connection; ``None`` for
        plaintext. aiokafka takes an ``ssl.SSLContext``, built here from the same files."""
        import faust  # noqa: PLC0415 - only the analytics role loads faust

        keys = dict(self.security)
        context = _ssl_context(keys) if "SSL" in self.security_protocol else None
        if self.security_protocol.startswith("SASL_"):
            mechanism = keys["sasl.mechanism"]
            if mechanism == "OAUTHBEARER":
                raise ConfigError(
                    "the analytics role (faust/aiokafka) does not take OAUTHBEARER; give its "
                    "principal a SCRAM or PLAIN user"
                )
            return faust.SASLCredentials(
                username=keys["sasl.username"],
                password=keys["sasl.password"],
                ssl_context=context,
                mechanism=mechanism,
            )
        if context is not None:
            return faust.SSLCredentials(context)
        return None

    def __str__(self) -> str:
        return self.bootstrap_servers


def _ssl_context(keys: dict[str, str]) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=keys.get("ssl.ca.location"))
    if "ssl.certificate.location" in keys:
        context.load_cert_chain(
            keys["ssl.certificate.location"],
            keys.get("ssl.key.location"),
            keys.get("ssl.key.password"),
        )
    return context


def connection(settings: KafkaSettings, principal: str | None = None) -> KafkaConnection:
    """The connection of ``principal`` (default: ``settings.principal``) under ``settings``."""
    if principal is not None and principal != settings.principal:
        settings = settings.model_copy(update={"principal": principal})
    protocol = settings.security_protocol
    keys: dict[str, str] = {}
    if protocol != "PLAINTEXT":
        keys["security.protocol"] = protocol
    if protocol.startswith("SASL_"):
        keys["sasl.mechanism"] = settings.sasl_mechanism
        if settings.sasl_mechanism == "OAUTHBEARER":
            keys["sasl.oauthbearer.method"] = "oidc"
            keys["sasl.oauthbearer.token.endpoint.url"] = settings.oauth_token_endpoint_url
            keys["sasl.oauthbearer.client.id"] = settings.oauth_client_id
            keys["sasl.oauthbearer.client.secret"] = settings.oauth_client_secret.get_secret_value()
            if settings.oauth_scope:
                keys["sasl.oauthbearer.scope"] = settings.oauth_scope
        else:
            keys["sasl.username"], keys["sasl.password"] = settings.credentials()
    if protocol in ("SSL", "SASL_SSL"):
        files = {
            "ssl.ca.location": settings.ssl_ca_location,
            "ssl.certificate.location": settings.ssl_certificate_location,
            "ssl.key.location": settings.ssl_key_location,
        }
        keys.update({k: str(v) for k, v in files.items() if v is not None})
        if settings.ssl_key_password.get_secret_value():
            keys["ssl.key.password"] = settings.ssl_key_password.get_secret_value()
    return KafkaConnection(
        settings.bootstrap_servers, protocol, settings.principal, tuple(sorted(keys.items()))
    )
