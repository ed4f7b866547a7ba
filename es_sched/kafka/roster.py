"""The roster on Kafka: each role process's liveness record on ``<prefix>.system`` (ADR 61, 63).

- ``RosterReader``: the compacted topic read from its beginning, the newest record per key
  (``es_sched.roster.Roster``); a tombstone removes a key. An unreadable record is logged with
  its offset and skipped (nothing acts on it: the next renewal of its key replaces it).
- ``claim(settings, keys, replace)``, at a process's start, before any role opens a client:
  refuses (``InstanceHeld``, ``ForeignDeployment``) by the rules of ``es_sched.roster``; on
  this host a holder's pid is looked up (``pid_running``), so a restart after a crash takes over
  at once. Returns the reader, which the beacon keeps reading.
- ``Beacon``: a thread that publishes the process's records every
  ``ES_SCHED_SYSTEM_LIVENESS_INTERVAL_S`` (partitions and lag from the roles' ``LagGauge`` in
  the process's metrics registry), at once when a role's partitions changed (ADR 79), and on
  ``close`` a ``stopped`` record of each claimed instance and a tombstone of each other (a
  clean exit; a process killed leaves its last record, which turns stale until
  ``roster.forgotten`` removes it). On start it removes the records ``roster.forgotten``
  names. Reading the topic between beats, it calls ``on_lost`` when a process started later
  took one of its keys (``--replace``, or a takeover from another host after this one's
  record went stale): newest start wins.

Records are produced idempotently with ``acks=all``, outside any role's transaction: a record is
a report, never an input of a decision.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime

from confluent_kafka import OFFSET_BEGINNING, Message

from es_sched import __version__, roster
from es_sched.errors import ConfigError, SchemaError
from es_sched.kafka.clients import producer
from es_sched.kafka.connection import KafkaConnection, connection
from es_sched.kafka.tail import Tail
from es_sched.kafka.topics import ensure_topic, topics_for
from es_sched.metrics import Registry
from es_sched.roster import Presence, Roster
from es_sched.serialization import records
from es_sched.settings import Settings

log = logging.getLogger(__name__)


class InstanceHeld(ConfigError):
    """The instance id is held by a live process; the message names its host and pid."""


class ForeignDeployment(ConfigError):
    """A live process of another deployment uses this topic prefix."""


def _now() -> datetime:
    return datetime.now(UTC)


def pid_running(pid: int) -> bool:
    """Whether process ``pid`` runs on this host (a zombie, dead but not reaped, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[-1].split()[0] != b"Z"
    except OSError:
        return True  # no /proc: os.kill's answer stands


class RosterReader:
    """``<prefix>.system`` from its beginning: the newest record of each key."""

    def __init__(self, bootstrap: KafkaConnection, topic: str) -> None:
        self.tail = Tail(bootstrap, topic, OFFSET_BEGINNING)
        self.roster = Roster()
        self.unreadable = 0

    def catch_up(self, timeout_s: float = 30.0) -> None:
        self._apply(self.tail.catch_up(timeout_s))

    def poll(self, timeout_s: float = 0.0) -> bool:
        """What arrived since; True if anything did."""
        msgs = self.tail.poll(500, timeout_s)
        self._apply(msgs)
        return bool(msgs)

    def records(self) -> list[Presence]:
        return list(self.roster.records.values())

    def _apply(self, msgs: Iterable[Message]) -> None:
        for msg in msgs:
            raw_key, value = msg.key(), msg.value()
            key = raw_key.decode(errors="replace") if isinstance(raw_key, bytes) else ""
            if value is None:
                self.roster.apply(key, None)
                continue
            try:
                self.roster.apply(key, records.decode_liveness(value))
            except SchemaError as exc:
                self.unreadable += 1
                log.warning(
                    "%s@%s: unreadable record skipped: %s", self.tail.topic, msg.offset(), exc
                )

    def close(self) -> None:
        self.tail.close()


def system_topic(settings: Settings) -> str:
    """``<prefix>.system``, created if missing (its shape from the catalogue): all a process
    needs before its roles start, which create and check the rest."""
    topics = topics_for(settings)
    t = next(t for t in topics.all() if t.name == topics.system)
    rf = topics.replication_factor
    ensure_topic(connection(settings.kafka), t.name, t.partitions, t.config, 30.0, rf)
    return t.name


def claim(settings: Settings, keys: Iterable[tuple[str, str]], replace: bool) -> RosterReader:
    """Check, before the roles start, that this process may take ``keys`` (role, instance).

    Raises ``ForeignDeployment`` when a live process of another deployment uses the topic
    prefix (``--replace`` does not override that: it is never on purpose), ``InstanceHeld`` when
    a claimed role's instance is held by a live process. Logs each takeover and its reason."""
    reader = RosterReader(connection(settings.kafka), system_topic(settings))
    try:
        reader.catch_up()
        sys = settings.system
        now, host, pid = _now(), socket.gethostname(), os.getpid()
        others = roster.foreign(reader.records(), sys.deployment_id, now, sys.stale_after_s)
        if others:
            o = others[0]
            raise ForeignDeployment(
                f"topic prefix {settings.kafka.topic_prefix!r} is in use by deployment "
                f"{o.deployment!r} ({o.role} {o.where}), and this process belongs to deployment "
                f"{sys.deployment_id!r}: give this deployment its own ES_SCHED_KAFKA_TOPIC_PREFIX, "
                f"or set ES_SCHED_SYSTEM_DEPLOYMENT={o.deployment} if it is the same deployment"
            )
        for role, instance in keys:
            if role not in roster.CLAIMED_ROLES:
                continue
            held = reader.roster.get(roster.key_of(role, instance))
            running = held is not None and held.host == host and pid_running(held.pid)
            verdict = roster.claim(held, host, pid, now, sys.stale_after_s, running, replace)
            if not verdict.take:
                raise InstanceHeld(verdict.reason)
            if held is not None and held.state == "running":
                log.warning("%s instance %r taken: %s", role, instance, verdict.reason)
    except BaseException:
        reader.close()
        raise
    return reader


class Beacon:
    """Publishes one process's liveness records (one per (role, instance)) on a thread."""

    def __init__(
        self,
        settings: Settings,
        keys: Iterable[tuple[str, str]],
        registry: Registry,
        reader: RosterReader,
        on_lost: Callable[[str], None],
        version: str = __version__,
        clock: Callable[[], datetime] = _now,
    ) -> None:
        self.settings, self.registry, self.reader, self.on_lost = (
            settings,
            registry,
            reader,
            on_lost,
        )
        self.clock = clock
        self.topic = topics_for(settings).system
        started, host, pid = clock(), socket.gethostname(), os.getpid()
        self.mine = {
            roster.key_of(r, i): Presence(
                settings.system.deployment_id, r, i, host, pid, version, started, started
            )
            for r, i in keys
        }
        self._producer = producer(connection(settings.kafka))
        self._stop = threading.Event()
        self._lost: set[str] = set()
        self._held: dict[str, tuple[str, ...]] = {}  # each key's partitions as last published
        self._next = 0.0  # monotonic time of the next renewal
        self._thread = threading.Thread(target=self._run, name="es-sched-beacon", daemon=True)

    def start(self) -> Beacon:
        host = socket.gethostname()
        for gone in roster.forgotten(self.reader.records(), host, pid_running):
            self._producer.produce(self.topic, None, gone.key.encode())
        self.publish()  # before the roles start: the claim is visible at once
        self._next = time.monotonic() + self.settings.system.liveness_interval_s
        self._thread.start()
        return self

    def publish(self) -> None:
        now = self.clock()
        for key, p in self.mine.items():
            if key in self._lost:
                continue
            lag = self.registry.lags.get(p.role)
            held = self._held[key] = lag.partitions if lag is not None else ()
            renewed = p.renewed(now, held, lag.records if lag is not None else None)
            self._producer.produce(self.topic, records.encode_liveness(renewed), key.encode())
        self._producer.poll(0)

    def _run(self) -> None:
        interval = self.settings.system.liveness_interval_s
        while not self._stop.is_set():
            try:
                self.reader.poll(min(interval, 0.5))
                self._check_taken()
                if self._due() or self._moved():
                    self.publish()
            except Exception:  # a report must never stop its roles
                log.exception("liveness record not published")
                self._stop.wait(1.0)

    def _due(self) -> bool:
        now = time.monotonic()
        if now < self._next:
            return False
        self._next = now + self.settings.system.liveness_interval_s
        return True

    def _moved(self) -> bool:
        """Whether a role's partitions changed since the last record: published at once, so
        that a decider that takes them over finds who held them even when that process
        stopped within an interval of getting them (ADR 79, ``es_sched.kafka.successor``)."""
        for key, p in self.mine.items():
            lag = self.registry.lags.get(p.role)
            if lag is not None and lag.partitions != self._held.get(key, ()):
                return True
        return False

    def _check_taken(self) -> None:
        for key, mine in self.mine.items():
            held = self.reader.roster.get(key)
            if key not in self._lost and held is not None and roster.taken_over(mine, held):
                self._lost.add(key)
                self.on_lost(
                    f"{mine.role} instance {mine.instance!r} was taken over by {held.where} "
                    f"(started {held.started_at:%H:%M:%S})"
                )

    def close(self, timeout_s: float = 10.0) -> None:
        """Stop publishing, then say each record's process stopped (a clean exit)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)
        now = self.clock()
        for key, p in self.mine.items():
            if key in self._lost:
                continue
            # A claimed instance says it is down; a process-keyed record has nothing to hold.
            value = records.encode_liveness(p.stopped(now)) if p.claims else None
            self._producer.produce(self.topic, value, key.encode())
        if self._producer.flush(timeout_s) > 0:
            log.warning("the stopped liveness records were not all delivered")
        self.reader.close()


def process_instance(instance: str = "") -> str:
    """The instance a process that holds none is keyed by: ``instance`` (if any) at its host
    and pid."""
    here = f"{socket.gethostname()}-{os.getpid()}"
    return f"{instance}@{here}" if instance else here
