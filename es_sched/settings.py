"""Typed settings, read once from ``ES_SCHED_*`` environment variables.

Each adapter has its own settings class and prefix, with defaults that work against the local
stack that ``es-sched stack up`` starts. ``load_settings()`` validates everything at start-up and
raises ``ConfigError`` naming the offending variable; nothing else in es-sched reads the
environment.
"""

from __future__ import annotations

import hashlib
import ipaddress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, TypeVar
from urllib.parse import urlencode, urlsplit

from pydantic import (
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, SettingsConfigDict

from es_sched.blacklist import Policy as BlacklistPolicy
from es_sched.errors import ConfigError


class KafkaSettings(BaseSettings):
    """``ES_SCHED_KAFKA_*``: where the brokers are and how topics are named."""

    model_config = SettingsConfigDict(env_prefix="ES_SCHED_KAFKA_", frozen=True)

    bootstrap_servers: str = "127.0.0.1:9092"
    topic_prefix: str = "es-sched"
    # Per-workflow topics. Fixed when the topics are created (a role refuses a topic of another
    # count: a workflow's partition holds its events, snapshots and timers), and the most
    # decider processes that can share the work. 4 suits one broker: a decider transaction
    # writes to every partition its workflows are on, one request and marker each (ADR 53);
    # a cluster sets its count for the largest deployment planned (docs/capacity.md).
    partitions: int = Field(default=4, ge=1, le=1000)
    # Replicas and min.insync.replicas of every topic es-sched creates; unset: the cluster's
    # defaults (a `stack up --kafka-brokers 3` cluster defaults to 3 and 2, ADR 20). When set,
    # they are also a requirement: a role refuses an existing topic with fewer.
    replication_factor: int | None = Field(default=None, ge=1, le=10)
    min_insync_replicas: int | None = Field(default=None, ge=1, le=10)

    # How clients reach the brokers (ADR 72). es_sched.kafka.connection turns these into the
    # one client configuration every producer, consumer, admin client and faust app gets.
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = Field(
        default="PLAINTEXT",
        description="Kafka's security.protocol: SASL_SSL for a secured cluster (credentials "
        "over TLS), SSL for TLS (and client certificates) alone.",
    )
    sasl_mechanism: Literal["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN", "OAUTHBEARER"] = Field(
        default="SCRAM-SHA-512",
        description="The SASL mechanism with SASL_PLAINTEXT / SASL_SSL. OAUTHBEARER fetches "
        "tokens by the OIDC client-credentials grant (the oauth_* settings).",
    )
    sasl_username: str = Field(
        default="",
        max_length=200,
        description="The SASL user of every role without a file in credentials_dir.",
    )
    sasl_password: SecretStr = Field(
        default=SecretStr(""), description="sasl_username's password (or sasl_password_file)."
    )
    sasl_password_file: Path | None = Field(
        default=None,
        description="A file holding sasl_username's password (a mounted secret); read when a "
        "client is made, so a rotated password reaches the next client.",
    )
    credentials_dir: Path | None = Field(
        default=None,
        description="One principal per role (ADR 72): a folder with a file per principal "
        "(decider, timers, retry-relay, dispatcher, projector, api, analytics, worker-<pool>, "
        "upstream, admin) holding 'username:password'; a role with no file there uses "
        "sasl_username. `es-sched stack up` writes one for the secured local Kafka.",
    )
    principal: str = Field(
        default="",
        max_length=100,
        pattern=r"^[A-Za-z0-9._-]*$",
        description="Whose file in credentials_dir this process's clients use; `es-sched run` "
        "sets it per role and a worker to worker-<pool>, so set it only for an upstream "
        "service (upstream) or an operator's CLI (admin).",
    )
    ssl_ca_location: Path | None = Field(
        default=None, description="PEM file of the CA that signed the brokers' certificates."
    )
    ssl_certificate_location: Path | None = Field(
        default=None, description="PEM client certificate, for brokers that ask for one (mTLS)."
    )
    ssl_key_location: Path | None = Field(
        default=None, description="PEM private key of ssl_certificate_location."
    )
    ssl_key_password: SecretStr = Field(
        default=SecretStr(""), description="The password of ssl_key_location, if encrypted."
    )
    oauth_token_endpoint_url: str = Field(
        default="", description="OAUTHBEARER: the OIDC provider's token endpoint."
    )
    oauth_client_id: str = Field(default="", description="OAUTHBEARER: the OIDC client id.")
    oauth_client_secret: SecretStr = Field(
        default=SecretStr(""), description="OAUTHBEARER: the OIDC client secret."
    )
    oauth_scope: str = Field(default="", description="OAUTHBEARER: scopes asked for, if any.")

    @field_validator("bootstrap_servers")
    @classmethod
    def _host_port_list(cls, value: str) -> str:
        for server in value.split(","):
            host, sep, port = server.strip().rpartition(":")
            if not sep or not host or not port.isdigit():
                raise ValueError(f"expected host:port[,host:port...], got {value!r}")
        return value

    @model_validator(mode="after")
    def _insync_within_replicas(self) -> KafkaSettings:
        rf, isr = self.replication_factor, self.min_insync_replicas
        if rf is not None and isr is not None and isr > rf:
            raise ValueError(f"min_insync_replicas={isr} exceeds replication_factor={rf}")
        return self

    @model_validator(mode="after")
    def _credentials_for_sasl(self) -> KafkaSettings:
        if not self.security_protocol.startswith("SASL_"):
            return self
        if self.sasl_mechanism == "OAUTHBEARER":
            if not (self.oauth_token_endpoint_url and self.oauth_client_id):
                raise ValueError("OAUTHBEARER needs oauth_token_endpoint_url and oauth_client_id")
        elif not (self.sasl_username or self.credentials_dir):
            raise ValueError(f"{self.security_protocol} needs sasl_username or credentials_dir")
        return self

    def credentials(self) -> tuple[str, str]:
        """The SASL user and password of ``principal``: its file in ``credentials_dir`` if there
        is one, else ``sasl_username`` with ``sasl_password_file`` or ``sasl_password``. Read
        from the files now, not at start-up: a rotated secret reaches the next client made.
        Raises ``ConfigError`` naming the file, never showing its content."""
        if self.credentials_dir is not None and self.principal:
            path = self.credentials_dir / self.principal
            if path.exists():
                user, sep, password = _read_secret(path).partition(":")
                if not sep or not user:
                    raise ConfigError(f"{path}: expected one line 'username:password'")
                return user, password
        if not self.sasl_username:
            where = f"no file {self.principal!r} in {self.credentials_dir}, and " * bool(
                self.credentials_dir and self.principal
            )
            raise ConfigError(
                f"no SASL user for principal {self.principal or '(none)'}: {where}"
                "ES_SCHED_KAFKA_SASL_USERNAME is empty"
            )
        if self.sasl_password_file is not None:
            return self.sasl_username, _read_secret(self.sasl_password_file)
        return self.sasl_username, self.sasl_password.get_secret_value()

    @property
    def first_port(self) -> int:
        return int(self.bootstrap_servers.split(",")[0].rpartition(":")[2])


def _read_secret(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise ConfigError(f"cannot read the secret file {path}: {exc.strerror}") from None


class PostgresSettings(BaseSettings):
    """``ES_SCHED_PG_*``: the read-model database, as a SQLAlchemy URL using psycopg 3."""

    model_config = SettingsConfigDict(env_prefix="ES_SCHED_PG_", frozen=True)

    url: str = "postgresql+psycopg://es_sched:es_sched@127.0.0.1:15432/es_sched"
    schema_name: str = Field(default="es_sched", pattern=r"^[a-z_][a-z0-9_]{0,40}$")
    # TLS to the server (ADR 72): libpq's own parameters, added to every connection's URL
    # (SQLAlchemy passes URL query parameters through to psycopg, and libpq reads them).
    sslmode: Literal["", "disable", "allow", "prefer", "require", "verify-ca", "verify-full"] = (
        Field(default="", description="libpq's sslmode; empty: libpq's default (prefer).")
    )
    sslrootcert: Path | None = Field(
        default=None, description="PEM file of the CA that signed the server's certificate."
    )
    sslcert: Path | None = Field(default=None, description="PEM client certificate, if asked.")
    sslkey: Path | None = Field(default=None, description="PEM private key of sslcert.")
    read_url: str = Field(
        default="",
        description="The read-only role's URL (ADR 73): the API's and the CLI's read-model "
        "queries connect with it, projectors and migrations with url; `es-sched stack up` "
        "creates the role. Empty: url for everything.",
    )

    @field_validator("url", "read_url")
    @classmethod
    def _postgres_url(cls, value: str, info: ValidationInfo) -> str:
        if info.field_name == "read_url" and not value:
            return value
        parts = urlsplit(value)
        if not parts.scheme.startswith("postgresql"):
            raise ValueError(f"expected a postgresql+psycopg:// URL, got scheme {parts.scheme!r}")
        if not parts.hostname or not parts.path.strip("/"):
            raise ValueError("the URL needs a host and a database name")
        return value

    @property
    def host(self) -> str:
        return urlsplit(self.url).hostname or "127.0.0.1"

    @property
    def port(self) -> int:
        return urlsplit(self.url).port or 5432

    @property
    def user(self) -> str:
        return urlsplit(self.url).username or "es_sched"

    @property
    def password(self) -> str:
        return urlsplit(self.url).password or ""

    @property
    def database(self) -> str:
        return urlsplit(self.url).path.strip("/")

    def for_reading(self) -> PostgresSettings:
        """These settings as the API and CLI queries use them: the read-only role's URL."""
        return self.model_copy(update={"url": self.read_url}) if self.read_url else self

    @property
    def engine_url(self) -> str:
        """``url`` with the TLS settings as libpq query parameters: what every engine and
        connection is made with (one rule, so no connection goes out without them)."""
        tls = {
            "sslmode": self.sslmode,
            "sslrootcert": str(self.sslrootcert or ""),
            "sslcert": str(self.sslcert or ""),
            "sslkey": str(self.sslkey or ""),
        }
        query = urlencode({k: v for k, v in tls.items() if v})
        if not query:
            return self.url
        return f"{self.url}{'&' if urlsplit(self.url).query else '?'}{query}"

    @property
    def libpq_dsn(self) -> str:
        """``engine_url`` without SQLAlchemy's ``+driver`` part, for psycopg.connect."""
        url = self.engine_url
        scheme, rest = url.split("://", 1)
        return "postgresql://" + rest if scheme != "postgresql" else url


class SearchSettings(BaseSettings):
    """``ES_SCHED_SEARCH_*``: Elasticsearch 8 or OpenSearch 2 behind one URL."""

    model_config = SettingsConfigDict(env_prefix="ES_SCHED_SEARCH_", frozen=True)

    url: str = "http://127.0.0.1:9200"
    flavor: Literal["opensearch", "elasticsearch"] = "opensearch"
    index_prefix: str = "es-sched"
    # Credentials and TLS of a secured cluster (ADR 72; README "A secured search engine").
    username: str = Field(default="", max_length=200, description="HTTP basic auth user.")
    password: SecretStr = Field(default=SecretStr(""), description="username's password.")
    api_key: SecretStr = Field(
        default=SecretStr(""),
        description="An API key (Elasticsearch's base64 'id:key' form) instead of basic auth.",
    )
    ca_certs: Path | None = Field(
        default=None, description="PEM file of the CA that signed an https url's certificate."
    )

    @model_validator(mode="after")
    def _one_way_in(self) -> SearchSettings:
        if self.username and self.api_key.get_secret_value():
            raise ValueError("set username/password or api_key, not both")
        return self

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"expected http(s)://host:port, got {value!r}")
        return value.rstrip("/")

    @property
    def port(self) -> int:
        parts = urlsplit(self.url)
        return parts.port or (443 if parts.scheme == "https" else 9200)


class StackSettings(BaseSettings):
    """``ES_SCHED_STACK_*``: how ``es-sched stack`` runs services on this machine."""

    model_config = SettingsConfigDict(env_prefix="ES_SCHED_STACK_", frozen=True)

    mode: Literal["auto", "local", "docker"] = "auto"
    state_dir: Path = Path(".state")
    cache_dir: Path | None = None
    kafka_controller_port: int = Field(default=9093, ge=1, le=65535)
    # KRaft nodes of the local Kafka; node i listens on the bootstrap port + 2(i-1) and the
    # controller port + 2(i-1). `stack up --kafka-brokers N` wins over this (ADR 20).
    kafka_brokers: int = Field(default=1, ge=1, le=5)
    # 512m ran out of heap (OutOfMemoryError, the controller gave up leadership, the broker
    # exited) with ~1,900 topics / 14,000 partitions left on a long-lived local broker by
    # interrupted benches and tests; 1g holds that with room (the JVM takes it lazily).
    kafka_heap: str = "1g"
    # More broker settings for the local Kafka's server.properties, as JSON
    # ('{"num.io.threads": "2"}'): a default of the stack's is replaced, a new key appended;
    # what makes the nodes one cluster is refused by es_sched.stack.kafka (ADR 49).
    kafka_properties: dict[str, str] = Field(default_factory=dict)
    kafka_security: Literal["plaintext", "sasl_ssl"] = Field(
        default="plaintext",
        description="How the local Kafka takes clients (ADR 73): sasl_ssl is SCRAM-SHA-512 "
        "over TLS with a throwaway CA (<state>/kafka-tls/ca.pem), one SCRAM user per principal "
        "(passwords in <state>/kafka-credentials/) and the ACLs of es_sched/stack/resources/"
        "acls.yaml for ES_SCHED_KAFKA_TOPIC_PREFIX; chosen when the state folder is first "
        "formatted.",
    )
    kafka_pools: list[str] = Field(
        default_factory=lambda: ["default"],
        description="Worker pools the secured local Kafka makes a worker-<pool> user for.",
    )
    search_heap: str = "768m"
    ready_timeout_s: float = Field(default=180.0, gt=0)
    compose_file: Path = Path("docker-compose.yml")

    @field_validator("kafka_properties")
    @classmethod
    def _properties(cls, value: dict[str, str]) -> dict[str, str]:
        bad = sorted(k for k, v in value.items() if not k.strip() or "\n" in k + v or "=" in k)
        if bad:
            raise ValueError(f"not a server.properties key and value: {bad}")
        return value

    @property
    def resolved_state_dir(self) -> Path:
        return self.state_dir.expanduser().resolve()

    @property
    def resolved_cache_dir(self) -> Path:
        base = self.cache_dir if self.cache_dir is not None else self.state_dir / "cache"
        return base.expanduser().resolve()


class RuntimeSettings(BaseSettings):
    """``ES_SCHED_RUN_*``: the decider, timer and retry roles of ``es-sched run``."""

    model_config = SettingsConfigDict(env_prefix="ES_SCHED_RUN_", frozen=True)

    instance: str = "0"  # stable per process slot: the decider's transactional.id suffix
    batch_max_records: int = Field(default=500, ge=1)
    batch_max_ms: int = Field(default=50, ge=1)  # an idle decider's wait for input (ADR 41)
    # A stopped (SIGSTOP, a stalled VM) role's open transaction holds its partitions' committed
    # offsets unstable (KIP-447) until the coordinator aborts it, so a successor waits this long
    # plus the broker's cleanup interval before it reads them. Shorter is not safer: with 10 s a
    # broker paused for 30 s left the decider's group offsets unstable for good (docs/adr/0078).
    transaction_timeout_ms: int = Field(default=30_000, ge=1000)
    command_max_bytes: int = Field(default=256 * 1024, ge=1024)
    retry_tiers_s: str = "5,30,300,3600"
    retry_release_per_s: float = Field(default=200.0, gt=0)
    # The reconciler (ADR 15): a worker task still SCHEDULED and unleased this long after it
    # was queued is queued again; the ready topic must keep records twice as long.
    requeue_after_s: float = Field(default=300.0, gt=0)
    metrics_port: int = Field(default=0, ge=0, le=65535)  # 0: no /metrics endpoint
    # Bounded state (ADR 18): an ended workflow's state is kept this long after it ended (a
    # retry, a late report, a duplicate command answered as before), then the decider forgets
    # it: its changelog snapshot is tombstoned and a small ended marker answers late inputs.
    retain_finished_s: float = Field(default=86_400.0, ge=0)
    # Static group membership (ADR 21, ADR 79): the decider, timers and retry relay join their
    # consumer groups as ``group.instance.id`` = their transactional id, the dispatcher as
    # ``<prefix>-dispatcher-<instance>``, so a process restarted under
    # the same instance gets its partitions back at once, without a rebalance; a stopped one
    # keeps them (idle) until it returns or its session ends. Off: dynamic members, which
    # hand their partitions over on a stop and are waited for a whole session after a crash.
    static_membership: bool = True
    # A decider given partitions ends the open transaction of the decider it took them from,
    # once that one is no longer in the group (ADR 79, ``es_sched.kafka.successor``), instead
    # of waiting for the coordinator to abort it (the transaction timeout and then some).
    # Static members only: the group names them.
    end_orphaned_transactions: bool = True
    # The young-generation GC threshold of a process running the decider, a projector or a
    # replay (ADR 30, es_sched.tuning): CPython's default runs the cycle collector every few
    # inputs over a batch's thousands of fresh, acyclic objects; 0 keeps the interpreter's
    # default.
    gc_young_threshold: int = Field(default=50_000, ge=0)
    # The thread switch interval of the same processes (ADR 45, es_sched.tuning): at CPython's
    # default a thread whose socket answered waits up to that long for the GIL while another
    # folds; a PostgreSQL projector's writer paid it on every statement. 0 keeps the
    # interpreter's.
    switch_interval_us: int = Field(default=500, ge=0)
    # Adaptive decider batches (ADR 30): while polls come back full, a batch doubles from
    # ``batch_max_records`` up to this ceiling, as long as one batch (decide, produce, commit)
    # stays within half of ``batch_budget_ms``; it shrinks back when the backlog is gone.
    batch_ceiling_records: int = Field(default=2_000, ge=1)
    batch_budget_ms: int = Field(default=500, ge=1)

    @field_validator("retry_tiers_s")
    @classmethod
    def _tiers(cls, value: str) -> str:
        try:
            tiers = [int(t) for t in value.split(",")]
        except ValueError:
            raise ValueError(f"expected comma-separated whole seconds, got {value!r}") from None
        if not tiers or tiers != sorted(set(tiers)) or tiers[0] <= 0:
            raise ValueError("tiers must be increasing positive seconds, e.g. 5,30,300")
        return value

    @property
    def retry_tiers(self) -> list[int]:
        return [int(t) for t in self.retry_tiers_s.split(",")]


class DispatchSettings(BaseSettings):
    """``ES_SCHED_DISPATCH_*``: the dispatcher role (leases, liveness, queues, placement)."""

    model_config = SettingsConfigDict(env_prefix="ES_SCHED_DISPATCH_", frozen=True)

    heartbeat_s: float = Field(default=5.0, gt=0)
    # A lease lasts lease_k heartbeats: a dead worker's tasks are back within that many of its
    # last heartbeat (issue 52: within three), a live one may miss lease_k - 1 in a row.
    lease_k: int = Field(default=3, ge=3, le=6)
    # The ready group's member is static under the run instance (ADR 79) when
    # ES_SCHED_RUN_STATIC_MEMBERSHIP is on too; off: a dynamic member, waited for a whole
    # session after a crash or a broker restart.
    static_membership: bool = True
    suspect_after_s: float = Field(default=15.0, gt=0)
    dead_after_s: float = Field(default=60.0, gt=0)
    aging_s: float = Field(default=60.0, ge=0)
    preempt_after_s: float = Field(default=60.0, ge=0)
    policy: Literal["binpack", "spread"] = "binpack"
    assignment_partitions: int = Field(default=64, ge=1, le=10_000)
    tick_ms: int = Field(default=20, ge=1, le=10_000)
    # Ready offsets are committed at most this often (after everything produced is delivered;
    # always on revoke and stop): a commit is a round trip the tick would otherwise wait for
    # every time. A crash re-delivers at most this much more of ready (ADR 31).
    commit_every_ms: int = Field(default=200, ge=0, le=60_000)
    # ADR 58: only a worker's own faults (a lease it let expire, a failure its handler calls a
    # host fault) count against it; the input's faults never do.
    blacklist_window: int = Field(
        default=10,
        ge=1,
        le=1000,
        description="A worker's last N counted outcomes (successes and its own faults) that "
        "decide a blacklisting; each dispatcher counts the tasks it placed.",
    )
    blacklist_min_outcomes: int = Field(
        default=5,
        ge=1,
        le=1000,
        description="No blacklisting before a worker's window holds this many outcomes.",
    )
    blacklist_ratio: float = Field(
        default=0.5,
        ge=0,
        lt=1,
        description="A worker is blacklisted when its own faults are more than this share of "
        "its window.",
    )
    fair_share: bool = Field(
        default=True,
        description="Within a priority level, tenants share a pool by weight (config "
        "tenant:<X>, default 1; ADR 68); false: the level's old order (older workflow first) "
        "whatever the tenant, so one tenant's backlog delays the others'.",
    )
    downstream_first: bool = Field(
        default=True,
        description="Across task types, the task with the fewest steps left in its workflow "
        "goes first at the same level (ADR 69); false: one task per type per round in the "
        "order the types were first seen.",
    )
    blacklist_s: float = Field(
        default=300.0,
        gt=0,
        description="How long a blacklisting lasts (the penalty); an operator may lift it "
        "sooner (es-sched workers lift, POST /api/v1/workers/{id}/lift, the console).",
    )
    # ADR 70: worker versions stopped or promoted by the analytics role's failure rates.
    version_judge_s: float = Field(
        default=2.0,
        ge=0,
        le=3600,
        description="How often the dispatcher owning ready partition 0 judges worker versions "
        "(version-rule and rollout records) against the analytics role's failure rates on the "
        "stats topic; 0 turns judging off (records already written still apply).",
    )

    learned_cost: bool = Field(
        default=True,
        description="Place a task whose resources are a cost model's estimate by that estimate "
        "corrected by what its type and size class measured (the analytics role's cost_ratio "
        "and memory_p95_mb on the stats topic, ADR 66); false places every task as declared.",
    )
    clear_lease_tokens: bool = Field(
        default=False,
        description="Place tasks on workers that publish no lease key (releases before ADR 74) "
        "and send them their lease tokens in clear, readable by every worker of their pool; "
        "false leaves such workers out of the fleet. For a rolling upgrade only.",
    )

    @property
    def blacklist_policy(self) -> BlacklistPolicy:
        return BlacklistPolicy(
            self.blacklist_window,
            self.blacklist_min_outcomes,
            self.blacklist_ratio,
            self.blacklist_s,
        )


class WorkerSettings(BaseSettings):
    """``ES_SCHED_WORKER_*``: the worker SDK (``es_sched.workers.Worker``)."""

    model_config = SettingsConfigDict(env_prefix="ES_SCHED_WORKER_", frozen=True)

    # ADR 44: a task still running this long is reported started on its own; a shorter one's
    # start travels with its outcome (one decider input fewer). 0: before the handler runs.
    started_after_s: float = Field(default=0.5, ge=0)
    # ADR 60: the most characters of log lines a task attempt keeps (``ctx.log``, a Conductor
    # worker's TaskResult logs and POST /api/tasks/{taskId}/log); past it the oldest lines give
    # way to the newest and a first line says how many were dropped. They travel with the
    # outcome in one record: at most 64 KiB characters.
    log_max_chars: int = Field(default=32 * 1024, ge=256, le=65536)
    # ADR 60: the most characters of a failed handler's traceback sent with the failure (its
    # last ones: the innermost frames and the exception).
    traceback_max_chars: int = Field(default=8 * 1024, ge=256, le=65536)


class MediaSettings(BaseSettings):
    """``ES_SCHED_MEDIA_*``: the built-in media task handlers (``es-sched worker --media``)."""

    model_config = SettingsConfigDict(env_prefix="ES_SCHED_MEDIA_", frozen=True)

    output_dir: Path = Path(".state/media/out")  # a task's ``output_dir`` input wins
    callback_secret: str = Field(default="", repr=False)  # HMAC key of callback bodies
    callback_attempts: int = Field(default=4, ge=1, le=20)  # POSTs within one task attempt
    callback_backoff_s: float = Field(default=0.5, ge=0)  # doubles after each failed POST
    callback_timeout_s: float = Field(default=10.0, gt=0)
    kill_grace_s: float = Field(default=5.0, ge=0)  # SIGTERM to SIGKILL for ffmpeg's group
    max_cpu: float = Field(default=2.0, gt=0)  # cost estimates never ask for more cpus
    hls_segment_s: float = Field(default=4.0, gt=0)

    @property
    def resolved_output_dir(self) -> Path:
        return self.output_dir.expanduser().resolve()


class ApiSettings(BaseSettings):
    """``ES_SCHED_API_*``: the HTTP API and console (``es-sched api``, role ``api``; ADR 23)."""

    model_config = SettingsConfigDict(env_prefix="ES_SCHED_API_", frozen=True)

    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65535)
    # ``off`` serves every route without credentials, allowed only on a loopback host (demo).
    auth: Literal["on", "off"] = "on"
    # HS256 key of the tokens ``POST /api/token`` issues; every API process of one deployment
    # shares it. Empty: a random key per process (tokens die with it; fine for one process).
    jwt_secret: str = Field(default="", repr=False)
    token_ttl_s: int = Field(default=3600, ge=60, le=7 * 24 * 3600)
    # The gateway worker: how many tasks the API process leases for HTTP workers at once.
    gateway_capacity: int = Field(default=64, ge=1, le=100_000)
    long_poll_max_ms: int = Field(default=30_000, ge=0, le=300_000)
    # The longest a write waits for its effect to be visible before answering 503 with its
    # token, and a read with ``?after=TOKEN`` for that command (ADR 56).
    read_your_writes_timeout_s: float = Field(default=10.0, gt=0)
    # How long an API process trusts what it read of a key (role, revoked) before reading it
    # again: a revoked key's tokens stop working within this many seconds (ADR 25).
    key_cache_s: float = Field(default=5.0, ge=0, le=300)
    # The console: how long the events topic's ends are cached for the lag notice, and the
    # most workflows one bulk action on "everything matching the filter" may touch.
    console_lag_cache_s: float = Field(default=3.0, ge=0)
    console_bulk_max: int = Field(default=10_000, ge=1, le=1_000_000)
    # The longest a task type stays wanted at one API process after an HTTP worker's last
    # request for it there (ADR 24); within it, a few of the gaps between those requests
    # (ADR 34). A leased task no poll took within that is handed back.
    gateway_demand_s: float = Field(default=10.0, gt=0, le=3600)
    # Serve the batch poll and the two task updates outside FastAPI's routing and dependencies
    # (ADR 36: same answers, less CPU per HTTP task); false serves them through FastAPI.
    lean_worker_routes: bool = True
    # The read model's connections per API process (its own pool; projectors keep theirs).
    # FastAPI runs sync routes on its thread pool; beyond this pool they wait for a connection:
    # an overflow connection is closed on return, so under load each would cost a new connect
    # (no overflow by default). More than the host's cores can serve at once gains nothing.
    pg_pool_size: int = Field(default=16, ge=1, le=200)
    pg_max_overflow: int = Field(default=0, ge=0, le=200)
    # Reads on the event loop (ADR 37) at once per API process, each on a kept connection. One
    # loop keeps few busy (a read is short on the server); the connections count against
    # PostgreSQL's max_connections with the pool above and the gateway's, per API process:
    # sized like the pool, a few processes exhausted the server's default (503 "too many
    # clients" on search, list and polls).
    pg_async_pool_size: int = Field(default=4, ge=1, le=200)
    # How long an API process reuses the offsets its rows reflect (``X-Es-Sched-Reflects``):
    # read before the rows, an older value is still a lower bound of what they reflect.
    reflects_cache_s: float = Field(default=0.5, ge=0, le=10)
    # How often an API process reads the events topic's ends and the fleet (worker statuses,
    # version bans) in the background (ADR 57): no request waits on the broker for them, and
    # every answer states how old the ends it measured its lag against are (``endsAgeMs``).
    ends_refresh_s: float = Field(default=0.25, gt=0, le=60)
    # Counts stop this many rows past the page's start and say so, as an exact count scans
    # every matching row: search's totalHits (header ``X-Es-Sched-Total-Capped``; paging on
    # moves the bound with the start) and the console's per-status counts ("N+").
    count_max: int = Field(default=1_000, ge=1, le=100_000_000)
    console_count_max: int = Field(default=1_000, ge=1, le=100_000_000)
    # ``es-sched api`` processes (uvicorn workers) sharing the port; one per core.
    workers: int = Field(default=1, ge=1, le=64)
    # Log-in throttling (``api.throttle``): failed ``POST /api/token`` and console log-ins
    # counted, in PostgreSQL for every API process, per key id at one address and per
    # address, in a window from the first failure; past either limit an attempt is answered
    # 429 with Retry-After until that window ends. A success clears its key-at-address count.
    # Failures of one key at one address before it is answered 429.
    login_key_failures: int = Field(default=5, ge=1, le=10_000)
    # failures from one address, whatever the keys, before it is answered 429
    login_address_failures: int = Field(default=20, ge=1, le=100_000)
    # the window a count lasts, from its first failure, seconds
    login_window_s: float = Field(default=300.0, gt=0, le=86_400)

    @field_validator("jwt_secret")
    @classmethod
    def _long_enough(cls, value: str) -> str:
        if value and len(value.encode()) < 32:
            raise ValueError("a JWT secret needs at least 32 bytes (RFC 7518 3.2), or empty")
        return value

    @model_validator(mode="after")
    def _auth_off_on_loopback_only(self) -> ApiSettings:
        if self.auth == "off" and not is_loopback(self.host):
            raise ValueError(f"auth=off is allowed on a loopback host only, not {self.host!r}")
        return self


def is_loopback(host: str) -> bool:
    """``localhost`` or an address in 127.0.0.0/8 or ::1 (never a name that could resolve out)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class SystemSettings(BaseSettings):
    """``ES_SCHED_SYSTEM_*``: what a deployment knows of itself (ADR 61, ADR 63): its id, and
    how often each role process says it is alive on ``<prefix>.system``."""

    model_config = SettingsConfigDict(env_prefix="ES_SCHED_SYSTEM_", frozen=True)

    # The deployment this process belongs to: stamped on each assignment (a worker runs only
    # its own deployment's tasks) and on each liveness record (a process refuses to start on a
    # topic prefix a live process of another deployment uses). Empty: derived from the
    # directory es-sched is installed in, so two checkouts differ and the containers of one
    # image agree; processes of one deployment installed elsewhere must set the same value.
    deployment: str = Field(default="", max_length=100, pattern=r"^[A-Za-z0-9._:@-]*$")
    # How often a role process publishes its liveness record (host, pid, partitions, lag).
    liveness_interval_s: float = Field(default=5.0, gt=0, le=3600)
    # A record not renewed for this many intervals is stale: its process is shown as stale,
    # and its instance id may be taken by a process on another host (ADR 61).
    stale_after_intervals: float = Field(default=3.0, ge=1.5, le=100)

    @property
    def stale_after_s(self) -> float:
        return self.liveness_interval_s * self.stale_after_intervals

    @property
    def deployment_id(self) -> str:
        """``deployment``, or ``install-<hash>`` of the directory es-sched is installed in."""
        if self.deployment:
            return self.deployment
        where = str(Path(__file__).resolve().parent.parent)
        return "install-" + hashlib.sha256(where.encode()).hexdigest()[:10]


class AnalyticsSettings(BaseSettings):
    """``ES_SCHED_ANALYTICS_*``: the analytics role (``es-sched run --role analytics``, ADR 64),
    which folds the events topic into windowed statistics on faust-streaming and publishes
    them as proposals on ``<prefix>.stats``."""

    model_config = SettingsConfigDict(env_prefix="ES_SCHED_ANALYTICS_", frozen=True)

    # The tumbling window the figures cover: run-time percentiles, queue waits and failure
    # rates are of the tasks that ended in the current window.
    window_s: float = Field(default=300.0, gt=0, le=7 * 24 * 3600)
    # A key's figures are published at most once per interval, and only when they changed.
    publish_interval_s: float = Field(default=5.0, gt=0, le=3600)
    # Run times and queue waits kept per key and window (a deterministic bottom-k sample):
    # exact percentiles up to this many runs per window, a uniform sample of them beyond.
    sample_size: int = Field(default=512, ge=10, le=100_000)
    # Windows kept (and their changelog) for this many window lengths after they close, so a
    # late event still lands in its own window.
    keep_windows: int = Field(default=2, ge=1, le=100)


class ScriptSettings(BaseSettings):
    """``ES_SCHED_SCRIPT_*``: JavaScript of INLINE tasks and javascript SWITCH/DO_WHILE
    conditions, run in a killable QuickJS child process (``scripting.sandbox``, ADR 76). A
    script past a limit fails its task (or its workflow's SWITCH) with the breach as reason."""

    model_config = SettingsConfigDict(env_prefix="ES_SCHED_SCRIPT_", frozen=True)

    time_limit_ms: int = Field(
        default=100,
        ge=1,
        le=60_000,
        description="CPU time one evaluation may use (QuickJS's interrupt, in the child).",
    )
    memory_limit_bytes: int = Field(
        default=32 * 1024 * 1024,
        ge=1024 * 1024,
        le=1024 * 1024 * 1024,
        description="JavaScript heap of one evaluation, bindings included.",
    )
    max_result_bytes: int = Field(
        default=256 * 1024,
        ge=1,
        le=16 * 1024 * 1024,
        description="Largest result, as UTF-8 JSON (it is stored in the task's output).",
    )
    grace_s: float = Field(
        default=2.0,
        gt=0,
        le=60,
        description="Wall time past the time limit before the child is killed: the interrupt "
        "misses some runaways (a backtracking regular expression), and a busy host delays "
        "an honest one.",
    )


class SlaSettings(BaseSettings):
    """``ES_SCHED_SLA_*``: SLA tiers and deadlines (ADR 67, rules in ``domain.sla``)."""

    model_config = SettingsConfigDict(env_prefix="ES_SCHED_SLA_", frozen=True)

    default_tier: Literal["", "P0", "P1", "P2", "P3"] = Field(
        default="",
        description="The tier a workflow started without one gets (recorded in its "
        "workflow.started); empty: none, and the workflow keeps the rules of priority alone.",
    )
    escalate_s: float = Field(
        default=60.0,
        ge=0,
        description="A task whose slack (deadline - now - expected remaining critical path) "
        "falls under this many seconds drops towards the most urgent level of its tier's band; "
        "0: no escalation.",
    )
    typical_task_s: float = Field(
        default=5.0,
        ge=0,
        description="A task's expected run time for the slack estimate when the analytics role "
        "has published no P50 for its type.",
    )
    reserve_p0: float = Field(
        default=0.2,
        ge=0,
        le=1,
        description="Share of each pool's task slots that tasks of tiers P1-P3 leave free "
        "for P0; tierless tasks are not held back.",
    )
    reserve_p1: float = Field(
        default=0.0,
        ge=0,
        le=1,
        description="Share of each pool's task slots that tasks of tiers P2-P3 leave free for P1.",
    )
    reserve_p2: float = Field(
        default=0.0,
        ge=0,
        le=1,
        description="Share of each pool's task slots that P3 tasks leave free for P2.",
    )

    retries_p0: int | None = Field(
        default=None,
        ge=0,
        le=100,
        description="Retries of each failed worker task of a P0 workflow, instead of its "
        "TaskDef's retryCount (recorded in workflow.started when the workflow is submitted"
        ", an urgent tier may retry more); unset: the TaskDef's.",
    )
    retries_p1: int | None = Field(
        default=None,
        ge=0,
        le=100,
        description="Retries of each failed worker task of a P1 workflow, instead of its "
        "TaskDef's retryCount (recorded in workflow.started when the workflow is submitted"
        "); unset: the TaskDef's.",
    )
    retries_p2: int | None = Field(
        default=None,
        ge=0,
        le=100,
        description="Retries of each failed worker task of a P2 workflow, instead of its "
        "TaskDef's retryCount (recorded in workflow.started when the workflow is submitted"
        "); unset: the TaskDef's.",
    )
    retries_p3: int | None = Field(
        default=None,
        ge=0,
        le=100,
        description="Retries of each failed worker task of a P3 workflow, instead of its "
        "TaskDef's retryCount (recorded in workflow.started when the workflow is submitted"
        ", bulk may retry less, so a failing type does not flood the workers with retries); "
        "unset: the TaskDef's.",
    )
    breaker_p0: float = Field(
        default=0.0,
        ge=0,
        le=1,
        description="P0 tasks of a type wait while its learned failure rate (the analytics "
        "role's) is above this; 0: never.",
    )
    breaker_p1: float = Field(
        default=0.0,
        ge=0,
        le=1,
        description="P1 tasks of a type wait while its learned failure rate (the analytics "
        "role's) is above this; 0: never.",
    )
    breaker_p2: float = Field(
        default=0.0,
        ge=0,
        le=1,
        description="P2 tasks of a type wait while its learned failure rate (the analytics "
        "role's) is above this; 0: never.",
    )
    breaker_p3: float = Field(
        default=0.0,
        ge=0,
        le=1,
        description="P3 tasks of a type wait while its learned failure rate (the analytics "
        "role's) is above this; 0: never.",
    )

    @model_validator(mode="after")
    def _reserves_fit(self) -> SlaSettings:
        if self.reserve_p0 + self.reserve_p1 + self.reserve_p2 >= 1:
            raise ValueError("reserve_p0 + reserve_p1 + reserve_p2 must leave P3 some slots (< 1)")
        return self

    @property
    def reserves(self) -> dict[str, float]:
        return {"P0": self.reserve_p0, "P1": self.reserve_p1, "P2": self.reserve_p2}

    @property
    def retries(self) -> dict[str, int | None]:
        return {
            "P0": self.retries_p0,
            "P1": self.retries_p1,
            "P2": self.retries_p2,
            "P3": self.retries_p3,
        }

    @property
    def breakers(self) -> dict[str, float]:
        return {
            "P0": self.breaker_p0,
            "P1": self.breaker_p1,
            "P2": self.breaker_p2,
            "P3": self.breaker_p3,
        }


@dataclass(frozen=True)
class Settings:
    kafka: KafkaSettings
    postgres: PostgresSettings
    search: SearchSettings
    stack: StackSettings
    runtime: RuntimeSettings
    dispatch: DispatchSettings
    media: MediaSettings = field(default_factory=MediaSettings)
    api: ApiSettings = field(default_factory=ApiSettings)
    worker: WorkerSettings = field(default_factory=WorkerSettings)
    system: SystemSettings = field(default_factory=SystemSettings)
    analytics: AnalyticsSettings = field(default_factory=AnalyticsSettings)
    sla: SlaSettings = field(default_factory=SlaSettings)
    script: ScriptSettings = field(default_factory=ScriptSettings)


_S = TypeVar("_S", bound=BaseSettings)


def _load(cls: type[_S]) -> _S:
    try:
        return cls()
    except ValidationError as exc:
        prefix = str(cls.model_config.get("env_prefix", ""))
        problems = "; ".join(
            f"{prefix}{'_'.join(str(p) for p in err['loc']).upper()}: {err['msg']}"
            for err in exc.errors()
        )
        raise ConfigError(f"invalid setting {problems}") from None


def load_script_settings() -> ScriptSettings:
    """The script limits alone (a script engine built outside a full ``load_settings``)."""
    return _load(ScriptSettings)


def load_settings() -> Settings:
    """Read and validate every setting; raise ``ConfigError`` naming the bad variable."""
    return Settings(
        kafka=_load(KafkaSettings),
        postgres=_load(PostgresSettings),
        search=_load(SearchSettings),
        stack=_load(StackSettings),
        runtime=_load(RuntimeSettings),
        dispatch=_load(DispatchSettings),
        media=_load(MediaSettings),
        api=_load(ApiSettings),
        worker=_load(WorkerSettings),
        system=_load(SystemSettings),
        analytics=_load(AnalyticsSettings),
        sla=_load(SlaSettings),
        script=_load(ScriptSettings),
    )
