"""The dispatcher role: ready tasks -> leases on workers (``es-sched run --role dispatcher``).

Modules: this one owns the clients, the core and the tick, and applies what the readers hand
it; ``readers`` holds one reader per topic below, each owning its consumer, its position and
its decoding; ``output`` produces and waits for deliveries; ``journal`` keeps the leases on
``<prefix>.leases``; ``records`` maps records to the core's objects.

Inputs:
- ``ready`` in group ``<prefix>-dispatcher``, a static member under the run instance (ADR 79:
  back at once after a restart or a broker outage; a second live process of the instance is
  refused at start, ``es_sched.roster``) (several dispatchers share the task types: the
  topic is keyed by task name, or rate-limit key). Each record becomes a queued ``ReadyTask``;
  the partitions owned set this dispatcher's share of every tenant limit (ADR 13).
- ``worker-status`` (whole topic from the beginning, no group): a ``WorkerStatus`` updates the
  fleet and is the worker's heartbeat for all its leases; a leased task missing from its
  ``running`` list for over a heartbeat is released; a tombstone removes the worker, and so
  does a report of another deployment (ADR 63; each assignment carries ours), or one without
  a lease key unless ``ES_SCHED_DISPATCH_CLEAR_LEASE_TOKENS`` (ADR 74); a ``Progress``
  extends the worker's leases.
- ``config`` (compacted, from the beginning; ``es_sched.dispatch.config``): limits,
  bans, pools, policies, blacklistings and tenants' shares and quotas, changeable at run time.
- ``stats`` (compacted, from the beginning; ``es_sched.kafka.stats.StatsView``, unless
  ``ES_SCHED_DISPATCH_LEARNED_COST=false``): the analytics role's proposals; a task whose
  resources are a cost estimate is placed by it corrected by its size class's learned cost
  (ADR 66; the core's ``placed_by``). Advice only: a view that falls behind or holds nothing
  leaves the estimate as declared.
- ``events`` (``read_committed``, from the end at start): task.completed / failed / timed_out /
  canceled / completed_with_errors free the task's resources; a canceled or timed-out task
  still leased is stopped on its worker at once (``Cancel``); a task.lease_expired of the
  lease still held (its worker declined it), or of a task let go on its worker's status
  meanwhile (kept for that, ``Dispatcher._let_go``), puts the task back at the head of its
  queue.

Lease tokens (ADR 74): each assignment's token is sealed to the ``lease_key`` of the worker's
latest report (``es_sched.serialization.sealed``: a box between that key and this process's
own, made at start), so only that worker process can echo it;
the other workers reading the same assignment partition cannot forge its reports. A key that
changes once the old one has been silent ``KEY_SILENCE_HEARTBEATS`` is a new process of the
worker: the leases it does not list as running were sealed to the old key, which nothing can
open any more, and are taken back at once. Another key while the worker's is live is another
process publishing under its id (the pool shares credentials): ignored, and counted.

Blacklisting (ADR 58): the dispatcher that placed a task counts its end against its worker
(``es_sched.blacklist.blame``: a lease it let expire or a host fault counts, the input's fault
never does); when the worker's own faults are most of its recent outcomes it writes a
``blacklist:<worker>`` record to ``config``, applies it at once, and every dispatcher applies it
when it reads it. ``es_sched_worker_blacklisted`` and ``es_sched_queue_unplaceable`` say so.

Worker versions (ADR 70, ``es_sched.versions``): the owner of ready partition 0 is the one
judge; every ``ES_SCHED_DISPATCH_VERSION_JUDGE_S`` it reads the analytics role's ``version``
failure rates (a ``StatsView`` of the stats topic) against the ``version-rule`` and ``rollout``
records, writes each stop, promotion or rollout stop it decides to ``config`` with the figures
it used, and applies it at once; every dispatcher applies the records it reads. Placement
honours them (``Fleet.eligible``); a ready task whose type no live version may take is counted
held when queued (``es_sched_tasks_held_total``) and its queue is unplaceable
(``reason="version_stopped"``) until an operator lifts or reverts the decision.

Every tick (``ES_SCHED_DISPATCH_TICK_MS`` at most; a ready record ends the wait): expired
leases -> ``ExpireLease`` to ``task-results`` and a ``Cancel`` to the worker; new assignments
-> the wire ``Assignment`` to the pool's assignments topic (key = worker id) and
``DispatchTask`` to ``task-results`` (key = workflow id); preemptions -> ``Cancel(preempted)``
and ``ExpireLease`` (the task is back at the head of its queue, its attempt not counted). Each
grant, lease, take-back and end is written to the lease journal.

Delivery: at least once. Ready offsets are committed (at most every
``ES_SCHED_DISPATCH_COMMIT_EVERY_MS``, and on revoke and stop) only after the producer flushed
the records of the tasks they carried, and never past a task still waiting for its first dispatch,
so a crash re-delivers every such task; the decider rejects a stale dispatch. Tasks past that
point (leased, or taken back and waiting again) are in the lease journal
(``es_sched.dispatch.journal``, ADR 14): on the assignment of a ready partition the dispatcher
reads the journal's same partition and resumes them, so a restart keeps every lease (a full TTL
from the restart, then heartbeats as usual) and every epoch count; on revoke it forgets them.
Poison records of ready, worker-status, config and the journal go to ``dead-letters``.

Kafka failures: a commit refused because this member fell out of its group or cannot reach the
coordinator is tried again next tick (``es_sched.dispatch.ready_offsets``); the consumer rejoins
by itself. While the broker is down records wait in the producer's queue and nothing is
committed past them; SIGTERM is still honoured within a second. A record the broker refused
for good, or a fatal client error, stops the role.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import assert_never

from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, TopicPartition

from es_sched.blacklist import LEASE_ENDED as LEASE_EXPIRED_END
from es_sched.blacklist import Candidate, unplaceable
from es_sched.dispatch import config as dispatch_config
from es_sched.dispatch import records as dispatch_records
from es_sched.dispatch.core.engine import Assignment, DispatchCore, WorkerDeath
from es_sched.dispatch.core.fairshare import FairShare
from es_sched.dispatch.core.lease_keys import Heard, LeaseKeys
from es_sched.dispatch.core.leases import Lease, LeaseTable
from es_sched.dispatch.core.placement import Fleet, Need
from es_sched.dispatch.core.queues import ReadyQueues, ReadyTask
from es_sched.dispatch.core.urgency import Urgency
from es_sched.dispatch.journal import LeaseJournal
from es_sched.dispatch.output import Output
from es_sched.dispatch.readers.config import ConfigReader
from es_sched.dispatch.readers.events import EventReader
from es_sched.dispatch.readers.ready import Arrival, ReadyReader
from es_sched.dispatch.readers.worker_status import (
    Report,
    StatusReader,
    StatusRecord,
    WorkerLeft,
)
from es_sched.domain.commands import Input
from es_sched.domain.learned import FailureRate
from es_sched.domain.learned_cost import LEARNED_KEY
from es_sched.domain.sla import TierPolicy
from es_sched.errors import InfrastructureError
from es_sched.kafka.clients import KafkaClients
from es_sched.kafka.connection import connection
from es_sched.kafka.failures import assign_at_committed, wait
from es_sched.kafka.static_membership import Fenced, StaticMember, rejoining
from es_sched.kafka.stats import StatsView
from es_sched.kafka.tail import Tail
from es_sched.kafka.topics import assignment_topic, ensure_topic, ensure_topics, topics_for
from es_sched.liveness import heard_at
from es_sched.metrics import LagGauge, Registry
from es_sched.roster import same_deployment
from es_sched.serialization import encode_input, sealed, wire
from es_sched.serialization.config import ConfigChange
from es_sched.serialization.partial import LEASE_ENDED, TaskEnd
from es_sched.serialization.records import worker_dead_alert
from es_sched.settings import Settings
from es_sched.versions import Stop

log = logging.getLogger("es_sched.dispatcher")
ROLE = "dispatcher"
GAUGE_EVERY_S = 0.5
# The last records of a tick (assignments, leases) are not waited for: they leave after this
# linger, or with the next tick's first delivery. librdkafka's default linger set a floor
# under every dispatch latency; a flush ignores linger anyway (ADR 31).
PRODUCER_LINGER_MS = 1
RESUME_RETRY_S = 1.0
# A worker's new lease key is believed (a restart) only once its old key has been silent this
# many heartbeats: a key changing while the old one still heartbeats is another process
# publishing under the worker's id (ADR 74). Two: one heartbeat's jitter is no silence.
KEY_SILENCE_HEARTBEATS = 2
RELEASED_KEPT = 10_000  # tasks let go on a worker's word, kept for a late task.lease_expired


def _utcnow() -> datetime:
    return datetime.now(UTC)


class Dispatcher:
    """The role: owns the clients, the core, the readers and the tick."""

    def __init__(
        self,
        settings: Settings,
        clock: Callable[[], datetime] = _utcnow,
        token: Callable[[], str] = lambda: secrets.token_hex(16),
        registry: Registry | None = None,
        clients: KafkaClients | None = None,
    ) -> None:
        self.settings, self.clock, self.token = settings, clock, token
        self.clients = clients or KafkaClients(connection(settings.kafka))
        self._stop = threading.Event()
        d = self.dispatch_settings = settings.dispatch
        self.topics = topics_for(settings)
        self.prefix = settings.kafka.topic_prefix
        self.bootstrap = connection(settings.kafka)
        self.group = f"{self.prefix}-dispatcher"
        self.member = StaticMember(
            self.group,
            f"{self.prefix}-dispatcher-{settings.runtime.instance}",
            settings.runtime.static_membership and settings.dispatch.static_membership,
        )
        self.deployment = settings.system.deployment_id
        self._foreign: set[str] = set()  # workers of another deployment, logged once each
        self._keyless: set[str] = set()  # workers without a lease key, logged once each
        # The key each worker's tokens are sealed to, and when one may change (ADR 74).
        self.lease_keys = LeaseKeys(KEY_SILENCE_HEARTBEATS * d.heartbeat_s)
        self.sealer = sealed.Sealer()  # this process's key pair, new each start
        self._contested_logged: dict[str, str] = {}  # worker id -> the other key last logged
        # The analytics role's proposals (ADR 64), opened in run(): learned run times for the
        # SLA slack (ADR 67), learned cost (ADR 66), worker versions' failure rates (ADR 70).
        self.stats: StatsView | None = None
        self.urgency = Urgency(settings.sla.escalate_s, settings.sla.typical_task_s, self._p50)
        self.core = DispatchCore(
            queues=ReadyQueues(d.aging_s, self.urgency),
            fleet=Fleet(d.suspect_after_s, d.dead_after_s, d.blacklist_policy),
            leases=LeaseTable(d.heartbeat_s, d.lease_k),
            policies={"default": d.policy},
            preempt_after_s=d.preempt_after_s,
            fair=FairShare(enabled=d.fair_share),
            downstream_first=d.downstream_first,
            tiers=TierPolicy(settings.sla.reserves, settings.sla.breakers),
            failures=self._failures,
        )
        self.ready_at: dict[str, float] = {}  # task id -> ready record time (latency metric)
        # task id -> (ready partition, task, lease epoch) of tasks let go on a worker's status
        self.released: OrderedDict[str, tuple[int, ReadyTask, int]] = OrderedDict()
        self.pool_topics: set[str] = set()
        self.started = threading.Event()  # set once subscribed (for in-process callers)
        self._gauges_at = 0.0
        self._commit_at = 0.0  # monotonic time the next ready-offset commit is due
        self._requeues_delivered = 0  # the journal's take-backs known to be on the broker
        r = self.registry = registry or Registry()
        self.lag = LagGauge(r, ROLE)
        self.m_depth = r.gauge("es_sched_queue_depth", "Ready tasks waiting, by type and level.")
        self.m_dispatched = r.counter("es_sched_dispatched_total", "Tasks assigned to workers.")
        self.m_expired = r.counter("es_sched_leases_expired_total", "Leases that expired.")
        self.m_worker_dead = r.counter(
            "es_sched_worker_dead_total", "Workers declared dead (silent past dead_after_s)."
        )
        self.m_limited = r.counter(
            "es_sched_rate_limited_total", "Dispatch attempts refused by a limit."
        )
        self.m_preempted = r.counter("es_sched_preemptions_total", "Tasks preempted.")
        self.m_latency = r.histogram(
            "es_sched_dispatch_latency_seconds", "Ready record time to assignment produced."
        )
        self.m_blacklisted = r.gauge(
            "es_sched_worker_blacklisted",
            "1 while a worker is blacklisted (its own faults were most of its recent outcomes).",
        )
        self.m_unplaceable = r.gauge(
            "es_sched_queue_unplaceable",
            "1 while tasks of a type wait and no worker of its pool can take one, by reason.",
        )
        self.m_version_decisions = r.counter(
            "es_sched_version_decisions_total",
            "Worker versions stopped or promoted by failure rate, by decision (ADR 70).",
        )
        self.m_held = r.counter(
            "es_sched_tasks_held_total",
            "Ready tasks queued while no live worker version may take their type (ADR 70).",
        )
        self.m_rollout_share = r.gauge(
            "es_sched_rollout_share",
            "The share of a task type's tasks a rolled-out worker version receives now.",
        )
        self.m_clear_tokens = r.counter(
            "es_sched_clear_lease_tokens_total",
            "Assignments sent with their lease token in clear, to workers without a lease key "
            "(ES_SCHED_DISPATCH_CLEAR_LEASE_TOKENS, ADR 74): any worker of the pool can read it.",
        )
        self.m_contested = r.counter(
            "es_sched_lease_keys_refused_total",
            "Worker reports ignored for a lease key other than the worker's live one: a "
            "second process under its id, or a restart within two heartbeats (ADR 74).",
        )
        self.m_rekeyed = r.counter(
            "es_sched_lease_key_changes_total",
            "Workers heard with a new lease key once the old one fell silent: restarts (ADR 74).",
        )
        self.m_learned = r.counter(
            "es_sched_learned_cost_placements_total",
            "Tasks placed by their cost estimate corrected by what their size class measured.",
        )
        self.m_cost_ratio = r.gauge(
            "es_sched_learned_cost_ratio",
            "The learned cost ratio (measured / estimated cpu-seconds) last placed by, per "
            "task type and size class.",
        )
        self._refused_seen: dict[str, int] = {}
        self.name = f"dispatcher-{settings.runtime.instance}"
        self.owned: set[int] = set()  # ready partitions; the owner of 0 judges versions
        self._judged_at = 0.0
        self._held: dict[str, str] = {}  # task type -> why held, as last logged

    def _p50(self, task_type: str, size_class: str) -> float | None:
        """The learned median run time of a type and size class, if the analytics role
        published one: the SLA slack estimate's (``core.urgency``)."""
        found = None if self.stats is None else self.stats.runtime(task_type, size_class)
        return None if found is None or found.samples == 0 else found.run_p50_s

    def _failures(self, task_type: str) -> tuple[float, int] | None:
        """A type's learned failure rate and outcomes: the tiers' breakers' (ADR 67)."""
        found = None if self.stats is None else self.stats.runtime(task_type, "any")
        return None if found is None else (found.failure_rate, found.samples + found.failures)

    # -- lifecycle -------------------------------------------------------------------------
    def run(self, stop: threading.Event) -> None:
        self._stop = stop
        # The default pool's topic first, so it gets the assignment partition count (ADR 5).
        self._pool_topic("default")
        ensure_topics(self.bootstrap, self.topics)
        self.producer = self.clients.producer(None, **{"linger.ms": PRODUCER_LINGER_MS})
        self.output = Output(self.producer, self.topics.dead_letters, ROLE, stop.is_set)
        self.journal = LeaseJournal(self.bootstrap, self.topics.leases, self.output)
        self.config = ConfigReader(
            Tail(self.bootstrap, self.topics.config, OFFSET_BEGINNING), self.output
        )
        self.status = StatusReader(
            Tail(self.bootstrap, self.topics.worker_status, OFFSET_BEGINNING), self.output
        )
        self.events = EventReader(Tail(self.bootstrap, self.topics.events, OFFSET_END))
        if not self._catch_up_views():
            return
        self.stats = StatsView(self.bootstrap, self.topics.stats)
        if self.dispatch_settings.learned_cost:
            self.core.learned = self.stats.runtime
        try:
            rejoining(stop, self.member, lambda: self._session(stop), self._forget_all)
        finally:
            for reader in (self.config, self.status, self.events):
                reader.close()
            if self.stats is not None:
                self.stats.close()
            log.info("dispatcher stopped: %d dispatched", int(self.m_dispatched.value()))

    def _session(self, stop: threading.Event) -> None:
        """One membership of the ready group: subscribe, tick until stopped (or fenced).

        A static member (ADR 79, ``group.instance.id`` = ``<prefix>-dispatcher-<instance>``): a
        dispatcher restarted under its instance, or back after a broker outage outlived its
        session, takes its partitions again at once; as a dynamic member it waited a whole
        session for the group to drop its old member id first."""
        consumer = self.clients.consumer(
            self.group,
            **{"session.timeout.ms": 10_000, "heartbeat.interval.ms": 2_000},
            **self.member.config(),
        )
        self.ready = ReadyReader(consumer, self.topics.ready, self.output, self.clock)
        self.ready.subscribe(self._on_assign, self._on_revoke, self._on_lost)
        log.info(
            "dispatcher started (group %s, %d workers)", self.group, len(self.core.fleet.workers)
        )
        self.started.set()
        fenced = False
        try:
            while not stop.is_set():
                self.step(self.dispatch_settings.tick_ms / 1000)
        except Fenced:
            fenced = True  # nothing of a fenced member's may be committed
            raise
        finally:
            if not fenced:
                self._flush_and_commit()
            self.ready.close()

    def _forget_all(self) -> None:
        """Before a rejoin: every partition's tasks, as if lost (the rejoined member resumes
        what it is assigned from the journal)."""
        owned = [TopicPartition(self.topics.ready, p) for p in sorted(self.owned)]
        self._forget(owned, "lost")

    def step(self, wait_s: float) -> None:
        """One tick: read what arrived, expire, dispatch, deliver, commit."""
        self.read_inputs(wait_s)
        now = self.clock()
        for lease in self.core.expire(now):
            self._take_back(lease, "lease expired", now)
            self._count(lease.worker_id, LEASE_EXPIRED_END, lease.task_id, "lease expired", now)
            self.m_expired.inc()
        self._judge_versions(now)
        for death in self.core.take_deaths():
            self._alert_dead(death, now)
        decisions = self.core.dispatch(now, self.token)
        assignments = [d for d in decisions if isinstance(d, Assignment)]
        for decision in decisions:
            if not isinstance(decision, Assignment):
                self._take_back(decision.victim, "preempted", now)
                self.m_preempted.inc()
        # The deliveries, in this order (ADR 50). 0. Take-backs written since the last delivery
        # (a journal record and an ExpireLease each), before any later grant of their task can
        # land. 1. The journal's new epochs with their DispatchTasks, in one delivery: the
        # decider must see each lease before the worker can answer (both land on the
        # workflow's task-results partition, but from two producers), and an epoch that
        # reached a worker is never granted again. A grant lost in a crash while its
        # DispatchTask landed is granted again under a new token, a new input id to the
        # decider; its first token reached no worker. 2. The assignments with the journal's
        # leases, then the ready offsets.
        if assignments and self.journal.requeues > self._requeues_delivered:
            requeues = self.journal.requeues
            if not self.output.delivered_all():
                return  # stopping: the tasks stay uncommitted, the next owner dispatches them
            self._requeues_delivered = requeues
        for a in assignments:
            self.journal.granting(a.task, a.lease.epoch, now)
            self._send(dispatch_records.assignment(a)[1], now)
        if assignments and not self.output.delivered_all():
            return
        # What leaves after that delivery is stamped when it leaves, not with the decision's
        # time: a worker reads an assignment's age to trust the end its last fetch brought
        # (``runner.FETCHED_END_FRESH_S``), and the decision's time made every assignment look
        # older by the delivery (longer under load, an outage's whole length), which
        # ``bench/timeline.py`` also counted as the worker's.
        sent = self.clock()
        for a in assignments:
            self._assign(a, sent)
        self._flush_and_commit(due_only=True)
        self._update_gauges()

    # -- inputs ----------------------------------------------------------------------------
    def read_inputs(self, wait_s: float) -> None:
        """What arrived on each topic since the last tick, applied in this order: config,
        worker status, events, then ready, which waits up to ``wait_s`` for its first record
        (``ReadyReader.poll``)."""
        for change in self.config.poll():
            self._configure(change)
        now = self.clock()
        for record in self.status.poll():
            self._on_status(record, now)
        for end in self.events.poll():
            self._on_event(end)
        for arrival in self.ready.poll(wait_s):
            self._on_ready(arrival)

    def _configure(self, change: ConfigChange) -> None:
        dispatch_config.apply(self.core, change, self.dispatch_settings.policy)
        if change.kind == "pool" and change.value is not None:
            self._pool_topic(change.value["pool"])
        log.info("config %s:%s = %s", change.kind, change.subject, change.value)

    def _on_ready(self, arrival: Arrival) -> None:
        task, tp, offsets = arrival.task, arrival.tp, self.ready.offsets
        if task.task_id in self.journal or offsets.stale(task.task_id, task.attempt):
            return  # re-delivered while we hold it (or its journal does), or after it ended
        self.released.pop(task.task_id, None)
        self.journal.track(task, tp[1])
        offsets.queued(tp, task.task_id, arrival.offset)
        self.ready_at[task.task_id] = arrival.at or time.time()
        self.core.enqueue(task)
        self._check_held(task.task_type)

    def _check_held(self, task_type: str) -> None:
        """A task queued while no live version may take its type is held, and said so: a
        counter per task, a log line when the reason changes (ADR 70)."""
        pool = self.core.pools.get(task_type, "default")
        why = self.core.fleet.version_held(pool, task_type, self.clock())
        if why is None:
            self._held.pop(task_type, None)
            return
        self.m_held.inc(task_type=task_type, reason="version_stopped")
        if self._held.get(task_type) != why:
            self._held[task_type] = why
            log.warning(
                "tasks of %s held: no live worker version may take them: %s", task_type, why
            )

    def _judge_versions(self, now: datetime) -> None:
        """The one judge of worker versions (the owner of ready partition 0): what the latest
        failure rates decide, written to the config topic and applied here at once. A second
        owner for a moment (a rebalance) decides the same from the same records and figures."""
        every = self.dispatch_settings.version_judge_s
        if self.stats is None or 0 not in self.owned or time.monotonic() < self._judged_at:
            return
        self._judged_at = time.monotonic() + every
        versions = self.core.fleet.versions
        if not versions.rules and not versions.rollouts:
            return
        rates = [v for v in self.stats.all().values() if isinstance(v, FailureRate)]
        for decision in versions.decide(rates, now, self.name):
            versions.apply(decision)
            if isinstance(decision, Stop):
                kind, subject = "version-stop", f"{decision.task_type}|{decision.version}"
                version, said = decision.version, "stopped"
            else:
                kind, subject = "rollout", decision.task_type
                version, said = decision.candidate, f"rollout {decision.state}"
            key = dispatch_config.key_for(kind, subject)
            self.output.produce(
                self.topics.config, key, dispatch_config.encode(decision.as_record()), now
            )
            self.m_version_decisions.inc(
                task_type=decision.task_type, version=version, decision=said
            )
            log.warning(
                "version %s for %s: %s (%s)", version, decision.task_type, said, decision.why
            )

    def _on_status(self, record: StatusRecord, now: datetime) -> None:
        match record:
            case WorkerLeft():  # its leases expire unless it comes back
                # Its key is kept until it is silent long enough (``_forget_silent_keys``): a
                # tombstone is no proof the worker left (any worker of the pool can write one).
                self.core.fleet.remove(record.worker_id)
            case wire.Progress():
                self.core.leases.heartbeat(record.worker_id, now)
            case Report():
                self._on_report(record, now)
            case _:
                assert_never(record)

    def _on_report(self, report: Report, now: datetime) -> None:
        status, d = report.status, self.dispatch_settings
        if not same_deployment(status.deployment, self.deployment):
            if status.worker_id not in self._foreign:  # ADR 63: never placed on
                self._foreign.add(status.worker_id)
                log.warning(
                    "worker %s belongs to deployment %r, not %r: left out of the fleet",
                    status.worker_id,
                    status.deployment,
                    self.deployment,
                )
            self.core.fleet.remove(status.worker_id)
            return
        wid, heard = status.worker_id, heard_at(report.sent_at, now, d.dead_after_s)
        key, previous = self._lease_key(status), self.lease_keys.keys.get(wid)
        verdict = self.lease_keys.hear(wid, key, heard)
        if verdict is Heard.CONTESTED:
            self._contested(status)
            return
        if not key and not d.clear_lease_tokens:
            self.core.fleet.remove(wid)
            self._forget_key(wid)
            return
        changed = verdict is Heard.CHANGED
        if changed:
            self.sealer.forget(previous)
        view = dispatch_records.worker_view(status, heard)
        self._pool_topic(view.pool)
        self.core.fleet.upsert(view)
        self.core.observe(status.worker_id, set(status.running), Need.of(status.used))
        if view.last_seen != now:
            return  # a stale report read at start-up is no heartbeat
        self.core.leases.heartbeat(status.worker_id, now)
        running, grace = set(status.running), d.heartbeat_s
        if changed:
            self._rekeyed(status.worker_id, view.pool, running, now)
        for lease in self.core.leases.held_by(status.worker_id):
            if lease.task_id not in running and (now - lease.started_at).total_seconds() >= grace:
                self._let_go(lease.task_id, lease.epoch)  # the worker no longer runs it

    def _lease_key(self, status: wire.WorkerStatus) -> str:
        """The key to seal the worker's tokens to; "" for a worker without one (logged once:
        it gets no task unless clear tokens are allowed)."""
        if status.lease_key:
            try:
                return sealed.public_key(status.lease_key).text
            except sealed.SealError as exc:
                why = str(exc)
        else:
            why = "it publishes no lease key (a release before ADR 74)"
        if status.worker_id not in self._keyless:
            self._keyless.add(status.worker_id)
            allowed = self.dispatch_settings.clear_lease_tokens
            log.warning(
                "worker %s: %s; %s",
                status.worker_id,
                why,
                "its lease tokens go in clear (ES_SCHED_DISPATCH_CLEAR_LEASE_TOKENS)"
                if allowed
                else "left out of the fleet",
            )
        return ""

    def _contested(self, status: wire.WorkerStatus) -> None:
        """A report under a worker's id with another key while its key is live: a second
        process under that id (workers of a pool share their credentials, so one may publish
        as another, ADR 74). Ignored: the tokens stay sealed to the live key. A real restart
        is believed once the old key has been silent long enough."""
        self.m_contested.inc(pool=status.pool or "default")
        if self._contested_logged.get(status.worker_id) == status.lease_key:
            return  # said once per key: an impostor may send many
        self._contested_logged[status.worker_id] = status.lease_key
        log.warning(
            "worker %s: a report with another lease key while its key was heard %s: ignored "
            "(a second process under its id, or a restart within %d heartbeats)",
            status.worker_id,
            self.lease_keys.heard[status.worker_id].isoformat(),
            KEY_SILENCE_HEARTBEATS,
        )

    def _forget_key(self, worker_id: str) -> None:
        self.sealer.forget(self.lease_keys.forget(worker_id))
        self._contested_logged.pop(worker_id, None)

    def _forget_silent_keys(self, now: datetime) -> None:
        """Keys of workers silent past ``dead_after_s`` (left, or dead and never placed on)
        are forgotten, so they do not pile up with worker ids."""
        for worker_id in self.lease_keys.silent(now, self.dispatch_settings.dead_after_s):
            self._forget_key(worker_id)

    def _rekeyed(self, worker_id: str, pool: str, running: set[str], now: datetime) -> None:
        """The worker published another key: a new process, which cannot open the tokens of
        leases granted before (sealed to the old key). Those it does not run (it could hold
        one only by other means: a gateway's store) are taken back now (``core.rekeyed``).
        Said and counted (``es_sched_lease_key_changes_total``)."""
        gone = self.core.rekeyed(worker_id, running)
        self.m_rekeyed.inc(pool=pool)
        log.warning(
            "worker %s restarted with a new lease key: %d lease(s) sealed to the old key "
            "taken back",
            worker_id,
            len(gone),
        )
        for lease in gone:
            self._take_back(lease, "worker restarted with a new lease key", now)

    def _on_event(self, end: TaskEnd) -> None:
        task_id, kind, epoch = end.task_id, end.type, end.lease_epoch
        if task_id not in self.journal:
            if kind == LEASE_ENDED:
                self._requeue_released(task_id, epoch)
            else:
                self.released.pop(task_id, None)
            return
        if kind == LEASE_ENDED:
            self._given_back(task_id, epoch)
            return
        lease = self.core.leases.leases.get(task_id)
        cancel = dispatch_records.stop_on_worker(lease, kind) if lease is not None else None
        if lease is not None and cancel is not None:  # within this tick, not at lease expiry
            self._to_worker(lease.worker_id, wire.encode(cancel), self.clock())
            log.info("task %s %s: cancel sent to %s", task_id, cancel.reason, lease.worker_id)
        flight = self.core.in_flight.get(task_id)
        if flight is not None:
            self.ready.offsets.ended(task_id, flight.task.attempt)
        if flight is not None:
            worker = flight.placement.worker_id
            self._count(worker, kind, task_id, end.reason, self.clock(), end)
        self._finished(task_id)

    def _count(
        self,
        worker_id: str,
        kind: str,
        task_id: str,
        reason: str,
        now: datetime,
        end: TaskEnd | None = None,
    ) -> None:
        """One end of a task we placed, for or against its worker (``blacklist.blame``); a
        blacklisting it decides goes to the config topic and applies here at once."""
        decided = self.core.fleet.record_outcome(
            worker_id,
            kind,
            now,
            task_id,
            reason,
            terminal=end is not None and end.terminal,
            host_fault=end is not None and end.host_fault,
            by=self.name,
        )
        if decided is None:
            return
        self.core.fleet.apply_blacklist(decided)
        key = dispatch_config.key_for("blacklist", worker_id)
        self.output.produce(
            self.topics.config, key, dispatch_config.encode(decided.as_record()), now
        )
        log.warning(
            "worker %s blacklisted until %s: %s (%s)",
            worker_id,
            decided.until.isoformat(),
            decided.why,
            "; ".join(f"{f.task_id}: {f.reason}" for f in decided.failures),
        )

    def _let_go(self, task_id: str, epoch: int) -> None:
        """Free a task its worker no longer lists, with no outcome read yet, and keep it a
        while: if the decider ended that lease (a declined task, ADR 24 a), the task's
        re-queued ready record may have come while we still held it (skipped as a duplicate)
        and its ``task.lease_expired`` only now; that event then queues it again."""
        held = self.journal.tasks.get(task_id)
        if held is not None:
            self.released[task_id] = (held[0], held[1], epoch)
            self.released.move_to_end(task_id)
            while len(self.released) > RELEASED_KEPT:
                self.released.popitem(last=False)
        self._finished(task_id)

    def _requeue_released(self, task_id: str, epoch: int) -> None:
        """The decider ended a lease we had let go already (``_let_go``): queue the task
        again, unless its ready record came back meanwhile or it ended."""
        found = self.released.pop(task_id, None)
        if found is None or found[2] != epoch:
            return
        partition, task, _ = found
        if self.ready.offsets.stale(task_id, task.attempt):
            return
        self.journal.track(task, partition)
        self.journal.queued(task_id, epoch, self.clock())
        self.ready_at[task_id] = time.time()
        self.core.enqueue(task, front=True)
        log.info("task %s: lease %d ended after its worker let it go; queued again", task_id, epoch)

    def _given_back(self, task_id: str, epoch: int) -> None:
        """The decider ended the lease we still hold (its worker declined it, ADR 24 a): queue
        the task again now. Its re-queued ready record may come first and is skipped while we
        hold the task, so waiting for the worker's status to free it would strand it until
        the reconciler's requeue timer (ADR 15). A lease we took back ourselves is gone already."""
        lease = self.core.given_back(task_id, epoch)
        if lease is not None:
            self.journal.queued(task_id, epoch, self.clock())
            log.info("task %s: lease %d given back by %s", task_id, epoch, lease.worker_id)

    # -- ready partitions ------------------------------------------------------------------
    def _catch_up_views(self) -> bool:
        """Read the config and worker-status topics to their ends before placing anything. A
        broker that is slow or away when the role starts is waited out (the capacity bench saw
        a watermark request time out and the role fail); stopping the role ends the wait
        (False)."""
        while not self._stop.is_set():
            try:
                config, status = self.config.catch_up(), self.status.catch_up()
            except InfrastructureError as exc:
                log.warning("catching up with config and worker status: %s; trying again", exc)
                wait(self._stop, RESUME_RETRY_S)
                continue
            now = self.clock()
            for change in config:
                self._configure(change)
            for record in status:
                self._on_status(record, now)
            return True
        return False

    def _on_assign(self, cons: Consumer, partitions: list[TopicPartition]) -> None:
        """Resume the journaled tasks of these ready partitions before any of their ready
        records is read (a record of a resumed task is then a re-delivery, skipped), then read
        from the committed offsets (``assign_at_committed``). A broker outage is waited out;
        stopping the role ends the wait. Tenant limits are shared by ready partition: our share
        follows what we own (ADR 13)."""
        parts = [tp.partition for tp in partitions]
        self.owned |= set(parts)
        self.core.limits.assigned(parts, self.topics.partitions, self.clock())
        log.info("assigned %s", parts)
        for number in sorted(set(parts)):
            while not self._stop.is_set():
                try:
                    entries = self.journal.load(number)
                    break
                except InfrastructureError as exc:
                    log.warning("reading the lease journal [%d]: %s; trying again", number, exc)
                    wait(self._stop, RESUME_RETRY_S)
            else:
                return
            now, leased = self.clock(), 0
            for entry in entries:
                if entry.task.task_id in self.journal:
                    continue  # still ours from before (assigned again without a revoke)
                self.journal.resumed(entry, number)
                self.core.resume(entry, now)
                leased += entry.lease is not None
            log.info(
                "ready partition %d: rebuilt %d leases, %d queued",
                number,
                leased,
                len(entries) - leased,
            )
        assign_at_committed(cons, partitions, self._stop)

    def _on_revoke(self, _cons: Consumer, partitions: list[TopicPartition]) -> None:
        """These partitions' tasks are now another dispatcher's: deliver and commit what is
        ours, then forget them (the new owner re-reads their ready records and journal)."""
        self._flush_and_commit()
        self._forget(partitions, "revoked")

    def _on_lost(self, _cons: Consumer, partitions: list[TopicPartition]) -> None:
        """Lost (the group moved on without us, e.g. across a broker restart): nothing can be
        committed for them any more; forget their tasks."""
        self._forget(partitions, "lost")

    def _forget(self, partitions: list[TopicPartition], how: str) -> None:
        parts = [tp.partition for tp in partitions]
        self.owned -= set(parts)
        self.core.limits.revoked(parts, self.clock(), lost=how == "lost")
        self.ready.offsets.forget(partitions)
        gone = self.journal.forget(set(parts))
        for task_id in [t for t, (p, _, _) in self.released.items() if p in parts]:
            del self.released[task_id]
        self.core.drop(gone)
        for task_id in gone:
            self.ready_at.pop(task_id, None)
        log.info("%s %s: dropped %d tasks", how, parts, len(gone))

    # -- decisions -------------------------------------------------------------------------
    def _assign(self, a: Assignment, now: datetime) -> None:
        # its DispatchTask was delivered already
        record, _ = dispatch_records.assignment(a, self.deployment)
        key = self.lease_keys.keys.get(record.worker_id)
        if key:
            record = replace(record, lease_token=self.sealer.seal(record.lease_token, key))
        else:
            self.m_clear_tokens.inc()
        pool = self.core.pools.get(a.task.task_type, "default")
        self.output.produce(
            assignment_topic(self.prefix, pool), record.worker_id, wire.encode(record), now
        )
        self.journal.leased(a.task, a.lease, a.placement.gpu, now)
        self.ready.offsets.done(a.task.task_id)
        at = self.ready_at.pop(a.task.task_id, None)
        if at is not None:
            self.m_latency.observe(max(0.0, time.time() - at))
        self.m_dispatched.inc()
        learned = a.placed_by.get(LEARNED_KEY)
        if isinstance(learned, dict):
            self.m_learned.inc(task_type=a.task.task_type)
            if learned.get("cost_ratio") is not None:
                labels = {"task_type": a.task.task_type, "size_class": learned["size_class"]}
                self.m_cost_ratio.set(learned["cost_ratio"], **labels)

    def _alert_dead(self, death: WorkerDeath, now: datetime) -> None:
        """ADR 71: a dead worker is operations' news, not only a lease matter: an alert record
        they route (``<prefix>.alerts``) and ``es_sched_worker_dead_total{pool}``."""
        log.warning(
            "worker %s (pool %s) declared dead: silent since %s, %d lease(s) taken back",
            death.worker_id,
            death.pool,
            death.last_seen.isoformat(),
            len(death.reclaimed),
        )
        value = worker_dead_alert(
            death.worker_id, death.pool, death.last_seen, now, self.name, death.reclaimed
        )
        self.output.produce(self.topics.alerts, death.worker_id, value, now)
        self.m_worker_dead.inc(pool=death.pool)
        # Its key and box go with it (worker ids may be new with every pod); one that comes
        # back is heard from anew, its key then no change.
        self._forget_key(death.worker_id)

    def _take_back(self, lease: Lease, reason: str, now: datetime) -> None:
        task = self.journal.task(lease.task_id)
        cancel, expired = dispatch_records.take_back(
            lease, task.workflow_id if task is not None else "", reason
        )
        self._to_worker(lease.worker_id, wire.encode(cancel), now)
        self._send(expired, now)
        self.journal.queued(lease.task_id, lease.epoch, now)
        log.info(
            "took back %s (epoch %d) from %s: %s",
            lease.task_id,
            lease.epoch,
            lease.worker_id,
            reason,
        )

    def _to_worker(self, worker_id: str, value: bytes, now: datetime) -> None:
        worker = self.core.fleet.workers.get(worker_id)
        pool = worker.pool if worker is not None else "default"
        self.output.produce(assignment_topic(self.prefix, pool), worker_id, value, now)

    def _finished(self, task_id: str) -> None:
        """The task ended (or its worker no longer runs it): free it, tombstone its journal."""
        if self.core.finished(task_id) is None:  # ended while waiting (e.g. canceled)
            self.core.queues = self.core.queues.without({task_id})
            self.ready.offsets.done(task_id)
        self.journal.ended(task_id, self.clock())
        self.ready_at.pop(task_id, None)

    # -- output ----------------------------------------------------------------------------
    def _send(self, inp: Input, now: datetime) -> None:
        self.output.produce(self.topics.task_results, inp.workflow_id, encode_input(inp), now)

    def _flush_and_commit(self, due_only: bool = False) -> None:
        """Deliver everything produced, then commit ready offsets up to the first task still
        waiting in each partition: a crash re-delivers exactly what was not dispatched.
        ``due_only`` (a tick): only once ``commit_every_ms`` has passed since the last one;
        the flush and the commit are two round trips a tick need not wait for every time."""
        if due_only and time.monotonic() < self._commit_at:
            return
        if self.output.delivered_all():
            self._commit_at = time.monotonic() + self.dispatch_settings.commit_every_ms / 1000
            self.ready.commit()

    def _pool_topic(self, pool: str) -> None:
        name = assignment_topic(self.prefix, pool)
        if name not in self.pool_topics:
            isr = self.topics.min_insync_replicas
            ensure_topic(
                self.bootstrap,
                name,
                self.dispatch_settings.assignment_partitions,
                {} if isr is None else {"min.insync.replicas": str(isr)},
                replication_factor=self.topics.replication_factor,
            )
            self.pool_topics.add(name)

    def _update_gauges(self) -> None:
        if time.monotonic() - self._gauges_at < GAUGE_EVERY_S:
            return
        self._gauges_at = time.monotonic()
        for task_type, levels in self.core.queues.depth().items():
            for level, n in enumerate(levels):
                self.m_depth.set(n, task_type=task_type, priority=str(level))
        for reason, total in self.core.limits.refused.items():
            new = total - self._refused_seen.get(reason, 0)
            if new > 0:
                self.m_limited.inc(new, limit=reason)
                self._refused_seen[reason] = total
        self._blacklist_gauges(self.clock())
        self._forget_silent_keys(self.clock())
        self.lag.update(self.ready.consumer, force=True)

    def _blacklist_gauges(self, now: datetime) -> None:
        fleet = self.core.fleet
        self.m_blacklisted.replace(
            [
                ({"worker": worker_id, "pool": b.pool}, 1.0)
                for worker_id, b in sorted(fleet.blacklist.items())
                if b.active(now)
            ]
        )
        candidates = [
            Candidate(
                w.worker_id,
                w.pool,
                w.types,
                fleet.status(w, now) if fleet.heartbeating(w, now) else "not heartbeating",
                w.version in fleet.banned_versions,
                fleet.blacklist.get(w.worker_id),
                fleet.versions.held_types(w.types, w.version),
            )
            for w in fleet.workers.values()
        ]
        self.m_rollout_share.replace(
            [
                ({"task_type": t, "candidate": r.candidate, "state": r.state}, r.given)
                for t, r in sorted(fleet.versions.rollouts.items())
            ]
        )
        rows: list[tuple[dict[str, str], float]] = []
        for task_type, levels in sorted(self.core.queues.depth().items()):
            if not sum(levels):
                continue
            pool = self.core.pools.get(task_type, "default")
            found = unplaceable(task_type, pool, candidates, now)
            if found is not None:
                rows.append(({"task_type": task_type, "pool": pool, "reason": found[0]}, 1.0))
        self.m_unplaceable.replace(rows)
