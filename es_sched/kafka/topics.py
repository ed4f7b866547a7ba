"""The topics of ../shared/DESIGN.md section 2, named from one prefix, created idempotently.

Per-workflow topics (commands, task results, events, decider changelog, retry tiers, timers)
share one partition count so a workflow's inputs, events and state live on the same partition
number. The events topic is never compacted and keeps history forever; changelog, timers,
definitions, config, worker status, the roles' liveness records (``system``) and the
dispatcher's lease journal are compacted (the
journal has the ready topic's partition count: its partition p holds the leases of the tasks
of ready partition p, ADR 14). The ready topic deletes by time only, and
keeps records at least ``READY_RETENTION_BOUNDS`` reconciler bounds (ADR 15): a task still
waiting for a lease gets a fresh ready record every bound, so its newest record outlives the
bound with a whole bound to spare for a late timer service or decider.

Whoever creates a topic first decides its shape, so every role checks at start-up
(``ensure_topics``) that the topics it uses have the partition count and the cleanup policy
and retention these settings expect (for ready: at least its floor), and refuses to run
(``ConfigError`` naming each mismatch) rather than put one workflow's inputs, events and
state on different partitions.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._config import ConfigResource  # not re-exported for mypy
from confluent_kafka.admin._resource import ResourceType
from confluent_kafka.cimpl import NewTopic

from es_sched.errors import ConfigError, InfrastructureError
from es_sched.kafka.connection import KafkaConnection
from es_sched.settings import Settings

COMPACT = {"cleanup.policy": "compact", "min.compaction.lag.ms": "60000"}
FOREVER = {"cleanup.policy": "delete", "retention.ms": "-1", "retention.bytes": "-1"}
WEEK_MS = 7 * 24 * 3600 * 1000
READY_RETENTION_BOUNDS = 2  # the ready topic keeps records this many reconciler bounds at least


@dataclass(frozen=True)
class Topic:
    name: str
    partitions: int
    config: dict[str, str]
    min_retention_ms: int | None = None  # retention.ms is a floor here, not an exact value


@dataclass(frozen=True)
class Topics:
    prefix: str
    partitions: int
    retry_tiers: tuple[int, ...] = (5, 30, 300, 3600)
    assignment_partitions: int = 64  # ADR 5: one partition per worker id hash
    requeue_after_s: float | None = None  # the reconciler's bound (ADR 15); None: no floor
    # ADR 20: replicas and min.insync.replicas to create with and require; None: the cluster's.
    replication_factor: int | None = None
    min_insync_replicas: int | None = None

    def ready_topic(self) -> Topic:
        """Created keeping a week (or two floors, if more); refused below the floor of
        ``READY_RETENTION_BOUNDS`` reconciler bounds, and with any size limit."""
        if self.requeue_after_s is None:
            return Topic(self.ready, self.partitions, {})
        floor = int(READY_RETENTION_BOUNDS * self.requeue_after_s * 1000)
        keep = {"retention.ms": str(max(WEEK_MS, 2 * floor)), "retention.bytes": "-1"}
        return Topic(self.ready, self.partitions, {"cleanup.policy": "delete", **keep}, floor)

    def _n(self, suffix: str) -> str:
        return f"{self.prefix}.{suffix}"

    @property
    def stats(self) -> str:
        """What the analytics role learned: proposals by key, advisory (ADR 64)."""
        return self._n("stats")

    @property
    def commands(self) -> str:
        return self._n("commands")

    @property
    def task_results(self) -> str:
        return self._n("task-results")

    @property
    def events(self) -> str:
        return self._n("events")

    @property
    def changelog(self) -> str:
        return self._n("decider-state")

    @property
    def ready(self) -> str:
        return self._n("ready")

    @property
    def assignments(self) -> str:
        return self._n("assignments")

    @property
    def worker_status(self) -> str:
        return self._n("worker-status")

    @property
    def timers(self) -> str:
        return self._n("timers")

    @property
    def dead_letters(self) -> str:
        return self._n("dead-letters")

    @property
    def definitions(self) -> str:
        return self._n("definitions")

    @property
    def config(self) -> str:
        return self._n("config")

    @property
    def leases(self) -> str:
        return self._n("leases")

    @property
    def alerts(self) -> str:
        """What operations must hear about, e.g. a worker declared dead (ADR 71): kept a
        retention period, never compacted, so every alert stays for whoever routes them."""
        return self._n("alerts")

    @property
    def system(self) -> str:
        """Each role process's liveness record, key ``<role>/<instance>`` (ADR 61)."""
        return self._n("system")

    def retry(self, tier_seconds: int) -> str:
        return self._n(f"retry-{tier_seconds}s")

    def retry_tier_for(self, delay_seconds: float) -> int:
        """The smallest tier that is at least the delay (the last one for longer delays)."""
        for tier in self.retry_tiers:
            if delay_seconds <= tier:
                return tier
        return self.retry_tiers[-1]

    def all(self) -> list[Topic]:
        if self.min_insync_replicas is None:
            return self._all()
        isr = {"min.insync.replicas": str(self.min_insync_replicas)}
        return [
            Topic(t.name, t.partitions, {**t.config, **isr}, t.min_retention_ms)
            for t in self._all()
        ]

    def _all(self) -> list[Topic]:
        n = self.partitions
        return [
            Topic(self.commands, n, {}),
            Topic(self.task_results, n, {}),
            Topic(self.events, n, FOREVER),
            Topic(self.changelog, n, COMPACT),
            self.ready_topic(),
            Topic(self.assignments, self.assignment_partitions, {}),
            Topic(self.worker_status, n, COMPACT),
            Topic(self.timers, n, COMPACT),
            Topic(self.dead_letters, n, FOREVER),
            Topic(self.definitions, 1, COMPACT),
            Topic(self.config, 1, COMPACT),
            *(Topic(self.retry(t), n, {}) for t in self.retry_tiers),
            Topic(self.leases, n, COMPACT),  # partition p: the tasks of ready partition p
            Topic(self.system, 1, COMPACT),  # small: every reader reads all of it
            Topic(self.stats, 1, COMPACT),  # small: every reader keeps all of it
            Topic(self.alerts, 1, {}),  # rare, read in order by one alert router
        ]


def assignment_topic(prefix: str, pool: str) -> str:
    """A pool's assignments topic (ADR 5); the default pool's is ``<prefix>.assignments``."""
    return f"{prefix}.assignments" if pool == "default" else f"{prefix}.assignments.{pool}"


def topics_for(settings: Settings) -> Topics:
    """The topics every role agrees on, from the full settings."""
    return Topics(
        settings.kafka.topic_prefix,
        settings.kafka.partitions,
        tuple(settings.runtime.retry_tiers),
        settings.dispatch.assignment_partitions,
        settings.runtime.requeue_after_s,
        settings.kafka.replication_factor,
        settings.kafka.min_insync_replicas,
    )


def ensure_topics(
    bootstrap_servers: KafkaConnection, topics: Topics, timeout_s: float = 30.0
) -> list[str]:
    """Create every missing topic; existing ones are left as they are. Returns those created."""
    admin = AdminClient(bootstrap_servers.config())
    existing = set(_list_topics(admin, bootstrap_servers, timeout_s))
    wanted = [t for t in topics.all() if t.name not in existing]
    rf = topics.replication_factor
    created = _create(admin, wanted, timeout_s, rf) if wanted else []
    # What we just created has our shape; anything else was made by someone else's settings.
    verify(admin, [t for t in topics.all() if t.name not in created], timeout_s, rf)
    return created


# What a topic's shape must be for the guarantees above; the broker's defaults fill the rest.
CHECKED = ("cleanup.policy", "retention.ms")


def verify(
    admin: AdminClient,
    expected: list[Topic],
    timeout_s: float = 30.0,
    replication_factor: int | None = None,
) -> None:
    """Refuse topics whose partition count, cleanup policy or retention differ from ``expected``,
    or with fewer replicas or a lower min.insync.replicas than these settings require (an
    existing topic is never changed: repartitioning would move workflows between partitions,
    and re-replicating is a cluster operation, so the operator decides)."""
    if not expected:
        return
    deadline = time.monotonic() + timeout_s
    while True:  # a topic another process created a moment ago may not be described yet
        try:
            found = admin.list_topics(timeout=timeout_s).topics
            resources = [ConfigResource(ResourceType.TOPIC, t.name) for t in expected]
            configs = {
                r.name: f.result(timeout=timeout_s)
                for r, f in admin.describe_configs(resources, request_timeout=timeout_s).items()
            }
            if all(t.name in found for t in expected):
                break
        except KafkaException as exc:
            if time.monotonic() > deadline:
                raise InfrastructureError(f"cannot describe the es-sched topics: {exc}") from exc
        if time.monotonic() > deadline:
            break
        time.sleep(0.2)
    wrong = []
    for t in expected:
        meta = found.get(t.name)
        have = len(meta.partitions) if meta is not None else 0
        if have != t.partitions:
            wrong.append(f"{t.name} has {have} partitions, these settings expect {t.partitions}")
        for key in CHECKED:
            if key == "retention.ms" and t.min_retention_ms is not None:
                continue  # a floor: _short_retention
            want = t.config.get(key, "delete" if key == "cleanup.policy" else None)
            entry = configs.get(t.name, {}).get(key)
            if want is not None and (entry is None or entry.value != want):
                got = None if entry is None else entry.value
                wrong.append(f"{t.name} has {key}={got}, es-sched needs {want}")
        wrong += _short_retention(t, configs.get(t.name, {}))
        wrong += _under_replicated(t, meta, configs.get(t.name, {}), replication_factor)
    if wrong:
        raise ConfigError(
            "the Kafka topics do not match these settings (ES_SCHED_KAFKA_PARTITIONS, "
            "ES_SCHED_KAFKA_TOPIC_PREFIX, ES_SCHED_DISPATCH_ASSIGNMENT_PARTITIONS, "
            "ES_SCHED_RUN_REQUEUE_AFTER_S, ES_SCHED_KAFKA_REPLICATION_FACTOR, "
            "ES_SCHED_KAFKA_MIN_INSYNC_REPLICAS): " + "; ".join(wrong)
        )


def _under_replicated(t: Topic, meta: Any, config: Any, rf: int | None) -> list[str]:
    """Fewer replicas (in any partition) or a lower min.insync.replicas than required: an
    acknowledged write would survive fewer broker losses than the operator asked for. The
    replicas assigned count, not the in-sync ones: a broker down for a while is no misconfig."""
    wrong = []
    if rf is not None and meta is not None and meta.partitions:
        have = min(len(p.replicas) for p in meta.partitions.values())
        if have < rf:
            wrong.append(f"{t.name} has {have} replicas, es-sched needs {rf}")
    want = t.config.get("min.insync.replicas")
    entry = config.get("min.insync.replicas")
    got = int(entry.value) if entry is not None and entry.value is not None else None
    if want is not None and (got is None or got < int(want)):
        wrong.append(f"{t.name} has min.insync.replicas={got}, es-sched needs {want}")
    return wrong


def _short_retention(t: Topic, config: Any) -> list[str]:
    """A topic with a retention floor must keep its records by time at least that long (-1:
    forever), and never delete them for size."""
    if t.min_retention_ms is None:
        return []
    wrong = []
    entry = config.get("retention.ms")
    ms = int(entry.value) if entry is not None and entry.value is not None else None
    if ms is None or -1 < ms < t.min_retention_ms:
        wrong.append(
            f"{t.name} has retention.ms={ms}, es-sched needs at least {t.min_retention_ms} "
            f"({READY_RETENTION_BOUNDS} x ES_SCHED_RUN_REQUEUE_AFTER_S)"
        )
    size = config.get("retention.bytes")
    if size is None or size.value != "-1":
        got = None if size is None else size.value
        wrong.append(f"{t.name} has retention.bytes={got}, es-sched needs -1 (no size limit)")
    return wrong


def _create(
    admin: AdminClient, wanted: list[Topic], timeout_s: float, replication_factor: int | None
) -> list[str]:
    rf = -1 if replication_factor is None else replication_factor  # -1: the broker's default
    futures = admin.create_topics(
        [
            NewTopic(t.name, num_partitions=t.partitions, replication_factor=rf, config=t.config)
            for t in wanted
        ],
        request_timeout=timeout_s,
    )
    created = []
    for name, future in futures.items():
        try:
            future.result(timeout=timeout_s)
            created.append(name)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:  # another process won
                raise InfrastructureError(f"cannot create topic {name}: {exc}") from exc
    return created


def ensure_topic(
    bootstrap_servers: KafkaConnection,
    name: str,
    partitions: int,
    config: dict[str, str] | None = None,
    timeout_s: float = 30.0,
    replication_factor: int | None = None,
) -> bool:
    """Create one topic if it is missing (e.g. a pool's assignments topic); True if created."""
    admin = AdminClient(bootstrap_servers.config())
    if name in _list_topics(admin, bootstrap_servers, timeout_s):
        return False
    rf = -1 if replication_factor is None else replication_factor
    topic = NewTopic(name, num_partitions=partitions, replication_factor=rf, config=config or {})
    future = admin.create_topics([topic], request_timeout=timeout_s)[name]
    try:
        future.result(timeout=timeout_s)
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:  # another process won
            raise InfrastructureError(f"cannot create topic {name}: {exc}") from exc
        return False
    return True


def existing_partitions(
    bootstrap_servers: KafkaConnection, name: str, timeout_s: float = 30.0
) -> int | None:
    """The partition count of topic ``name``, None if it does not exist."""
    admin = AdminClient(bootstrap_servers.config())
    meta = _list_topics(admin, bootstrap_servers, timeout_s).get(name)
    return None if meta is None or meta.error is not None else len(meta.partitions)


def _list_topics(
    admin: AdminClient, bootstrap_servers: KafkaConnection, timeout_s: float
) -> dict[str, Any]:
    """The cluster's topics by name (their metadata), or the reason the broker could not say."""
    try:
        return dict(admin.list_topics(timeout=timeout_s).topics)
    except KafkaException as exc:
        raise InfrastructureError(
            f"cannot list Kafka topics at {bootstrap_servers}: {exc}"
        ) from exc
