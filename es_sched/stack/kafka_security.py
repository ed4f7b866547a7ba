"""The local Kafka secured (ADR 73): SASL/SCRAM-SHA-512 over TLS, one SCRAM user per principal,
and the ACLs of one declarative file, ``resources/acls.yaml``.

- ``LocalSecurity.prepare()`` (before the first start): a throwaway CA and the broker's
  certificate, made with the ``openssl`` CLI (the JDK's keytool would need a keystore
  conversion; Kafka reads PEM itself), and one random password per principal, each in
  ``<state>/kafka-credentials/<principal>`` as ``principal:password`` (mode 0600) — the folder
  ``ES_SCHED_KAFKA_CREDENTIALS_DIR`` names for the roles (ADR 72).
- ``broker_lines()``: the listener, TLS, SASL and authorizer lines of ``server.properties``.
- ``format_args()``: the admin's SCRAM user, made when the storage is formatted (KIP-900): the
  brokers talk to each other as admin before any user could be added over the network.
- ``after_ready(admin)``: every other principal's SCRAM user (upserted over the admin
  connection, so no password is on a command line) and the ACLs of ``acls.yaml`` for the
  topic prefix and pools of the settings.
"""

from __future__ import annotations

import os
import secrets
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from confluent_kafka.admin import AdminClient

# The ACL and SCRAM types live in confluent-kafka's submodules (its package does not re-export
# them to a type checker).
from confluent_kafka.admin._acl import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
)
from confluent_kafka.admin._resource import ResourcePatternType, ResourceType
from confluent_kafka.admin._scram import (
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialAlteration,
    UserScramCredentialUpsertion,
)

from es_sched.errors import StackError
from es_sched.kafka.connection import KafkaConnection
from es_sched.settings import Settings
from es_sched.stack.base import resource_text

ADMIN = "admin"
MECHANISM = "SCRAM-SHA-512"
SCRAM_ITERATIONS = 8192  # Kafka's minimum for SCRAM-SHA-512 is 4096


@dataclass(frozen=True)
class Grant:
    """One ACL: ``principal`` may ``operation`` on ``resource`` (a prefix when ``prefixed``)."""

    principal: str
    resource: str  # "topic", "group", "transactional_id"
    name: str
    prefixed: bool
    operation: str  # "read", "write", "describe", "describe_configs", "create"

    def binding(self) -> AclBinding:
        return AclBinding(
            _RESOURCE[self.resource],
            self.name,
            ResourcePatternType.PREFIXED if self.prefixed else ResourcePatternType.LITERAL,
            f"User:{self.principal}",
            "*",
            _OPERATION[self.operation],
            AclPermissionType.ALLOW,
        )


_RESOURCE = {
    "topic": ResourceType.TOPIC,
    "group": ResourceType.GROUP,
    "transactional_id": ResourceType.TRANSACTIONAL_ID,
}
_OPERATION = {
    "read": AclOperation.READ,
    "write": AclOperation.WRITE,
    "describe": AclOperation.DESCRIBE,
    "describe_configs": AclOperation.DESCRIBE_CONFIGS,
    "create": AclOperation.CREATE,
}


def grants(prefix: str, pools: list[str], text: str | None = None) -> list[Grant]:
    """``acls.yaml`` (or ``text``) for one topic prefix and these worker pools."""
    doc: dict[str, Any] = yaml.safe_load(text if text is not None else resource_text("acls.yaml"))
    out: list[Grant] = []
    for name, rules in doc["principals"].items():
        for pool in pools if "{pool}" in name else [""]:
            principal = name.replace("{pool}", pool)
            suffix = "" if pool in ("", "default") else f".{pool}"
            fill = {"prefix": prefix, "pool": pool, "pool_suffix": suffix}
            out += _expand(principal, doc.get("common", {}), prefix, fill)
            out += _expand(principal, rules, prefix, fill)
    return list(dict.fromkeys(out))  # one binding each: the broker refuses duplicates


def _expand(
    principal: str, rules: dict[str, Any], prefix: str, fill: dict[str, str]
) -> list[Grant]:
    out: list[Grant] = []
    for op in ("read", "write", "describe", "create"):
        for topic in rules.get(op, []):
            name = topic.format(**fill)
            prefixed = name.endswith("*")
            full = f"{prefix}." + name.rstrip("*")
            out.append(Grant(principal, "topic", full, prefixed, op))
            if op == "describe":
                out.append(Grant(principal, "topic", full, prefixed, "describe_configs"))
            if op in ("read", "write"):  # a reader or writer also looks the topic up
                out.append(Grant(principal, "topic", full, prefixed, "describe"))
    for group in rules.get("groups", []):
        out.append(Grant(principal, "group", group.format(**fill), True, "read"))
    for txn in rules.get("transactional_ids", []):
        for op in ("write", "describe"):
            out.append(Grant(principal, "transactional_id", txn.format(**fill), True, op))
    return out


def principals(pools: list[str], text: str | None = None) -> list[str]:
    doc: dict[str, Any] = yaml.safe_load(text if text is not None else resource_text("acls.yaml"))
    names = [
        n.replace("{pool}", p)
        for n in doc["principals"]
        for p in (pools if "{pool}" in n else [""])
    ]
    return [ADMIN, *names]


class LocalSecurity:
    """The secured local broker's files under ``<state>``: ``kafka-tls/`` and
    ``kafka-credentials/``."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        state = settings.stack.resolved_state_dir
        self.tls = state / "kafka-tls"
        self.credentials = state / "kafka-credentials"
        self.pools = list(settings.stack.kafka_pools)

    @property
    def ca(self) -> Path:
        return self.tls / "ca.pem"

    @property
    def broker_pem(self) -> Path:
        return self.tls / "broker.pem"

    def prepare(self) -> None:
        self.credentials.mkdir(parents=True, exist_ok=True)
        os.chmod(self.credentials, 0o700)
        for principal in principals(self.pools):
            path = self.credentials / principal
            if not path.exists():
                path.touch(0o600)
                path.write_text(f"{principal}:{secrets.token_urlsafe(24)}\n")
        if not self.broker_pem.exists():
            self._make_tls()

    def password(self, principal: str) -> str:
        return (self.credentials / principal).read_text().strip().partition(":")[2]

    def _make_tls(self) -> None:
        """A CA valid for a year and a broker certificate for 127.0.0.1 and localhost signed by
        it (librdkafka checks the name: ``ssl.endpoint.identification.algorithm=https``)."""
        self.tls.mkdir(parents=True, exist_ok=True)
        os.chmod(self.tls, 0o700)
        t = self.tls
        ext = t / "san.cnf"
        ext.write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
        files = {
            "ca": self.ca,
            "ca_key": t / "ca.key",
            "ca_subject": "/CN=es-sched local CA",
            "key_pem": t / "broker.key.pem",
            "csr": t / "broker.csr",
            "crt": t / "broker.crt",
            "key": t / "broker.key",
            "san": ext,
        }
        # Split before the names are filled in: a path or subject may hold spaces.
        steps = [
            [word.format(**files) for word in line.split()]
            for line in (
                "req -x509 -newkey rsa:2048 -nodes -days 365 -subj {ca_subject}"
                " -keyout {ca_key} -out {ca}",
                "req -newkey rsa:2048 -nodes -subj /CN=localhost -keyout {key_pem} -out {csr}",
                "x509 -req -in {csr} -CA {ca} -CAkey {ca_key} -CAcreateserial -days 365"
                " -extfile {san} -out {crt}",
                # Kafka's PEM key store wants the key as PKCS#8.
                "pkcs8 -topk8 -nocrypt -in {key_pem} -out {key}",
            )
        ]
        for step in steps:
            done = subprocess.run(["openssl", *step], capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise StackError(f"openssl {step[0]} failed: {done.stderr.strip()[-500:]}")
        self.broker_pem.write_text((t / "broker.key").read_text() + (t / "broker.crt").read_text())
        os.chmod(self.broker_pem, 0o600)

    def broker_lines(self, port: int, controller_port: int) -> dict[str, str]:
        """server.properties for a SASL_SSL client listener (the controller listener stays
        plaintext on loopback; it serves only the KRaft quorum's requests, whose principal is
        ANONYMOUS, so that one is a super user beside admin)."""
        jaas = (
            "org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="{ADMIN}" password="{self.password(ADMIN)}";'
        )
        return {
            "listeners": f"SASL_SSL://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
            "advertised.listeners": f"SASL_SSL://127.0.0.1:{port}",
            "inter.broker.listener.name": "SASL_SSL",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,SASL_SSL:SASL_SSL",
            "sasl.enabled.mechanisms": MECHANISM,
            "sasl.mechanism.inter.broker.protocol": MECHANISM,
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": jaas,
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(self.broker_pem),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.ca),
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": f"User:{ADMIN};User:ANONYMOUS",
            "allow.everyone.if.no.acl.found": "false",
        }

    def format_args(self) -> list[str]:
        scram = f"{MECHANISM}=[name={ADMIN},password={self.password(ADMIN)}]"
        return ["--add-scram", scram]

    def admin(self, bootstrap: str) -> KafkaConnection:
        """The admin's connection to this broker, from the stack's own files."""
        keys = {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": MECHANISM,
            "sasl.username": ADMIN,
            "sasl.password": self.password(ADMIN),
            "ssl.ca.location": str(self.ca),
        }
        return KafkaConnection(bootstrap, "SASL_SSL", ADMIN, tuple(sorted(keys.items())))

    def after_ready(self, admin: KafkaConnection) -> None:
        """Every principal's SCRAM user and the ACLs of ``acls.yaml``."""
        client = AdminClient(admin.config(log_level=0))
        users: list[UserScramCredentialAlteration] = [
            UserScramCredentialUpsertion(
                p,
                ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, SCRAM_ITERATIONS),
                self.password(p).encode(),
            )
            for p in principals(self.pools)
            if p != ADMIN
        ]
        _wait_all(client.alter_user_scram_credentials(users), "creating SCRAM users")
        bindings = [g.binding() for g in grants(self.settings.kafka.topic_prefix, self.pools)]
        _wait_all(client.create_acls(bindings), "creating ACLs")

    def missing(self, admin: KafkaConnection) -> str:
        """What ``after_ready`` still has to make: the last principal's user, or the ACLs of
        the topic prefix (a state folder reused with another prefix); empty when nothing."""
        client = AdminClient(admin.config(log_level=0))
        last = principals(self.pools)[-1]
        try:
            described = client.describe_user_scram_credentials([last])
            if isinstance(described, dict):
                described[last].result(timeout=10)
            wanted = grants(self.settings.kafka.topic_prefix, self.pools)[-1].binding()
            found = client.describe_acls(_filter(wanted)).result(timeout=10)
        except Exception as exc:  # noqa: BLE001 - the broker's answer "no such user" is one
            return f"users not made yet ({type(exc).__name__})"
        return "" if found else f"no ACLs for topic prefix {self.settings.kafka.topic_prefix}"


def _filter(binding: AclBinding) -> AclBindingFilter:
    return AclBindingFilter(
        binding.restype,
        binding.name,
        binding.resource_pattern_type,
        binding.principal,
        binding.host,
        binding.operation,
        binding.permission_type,
    )


def _wait_all(futures: dict[Any, Any], what: str) -> None:
    for key, future in futures.items():
        try:
            future.result(timeout=60)
        except Exception as exc:  # noqa: BLE001 - a KafkaException or a timeout: both fatal here
            raise StackError(f"{what}: {key}: {exc}") from None
