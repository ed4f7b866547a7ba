"""The decider role: exactly-once consume-transform-produce over Kafka transactions.

Inputs: ``commands`` and ``task-results`` (group ``<prefix>-decider``, ``read_committed``, the
range assignor so partition *p* of both topics goes to the same member). Per poll batch, in
ONE transaction (``es_sched.kafka.transactional``, ``transactional.id =
<prefix>-decider-<instance>``): events, changelog snapshots, ready tasks, timers, retry
requests, commands to other workflows and dead letters are produced, then the batch's offsets
are sent with the consumer group metadata (KIP-447 fencing) and the transaction commits.
Offsets are committed only there. In-memory state changes are staged and kept only after the
commit succeeds, so memory never runs ahead of the log:

- an aborted batch: the staged changes are dropped and the consumer rewinds to the committed
  offsets, so the batch is read and decided again;
- a lost producer (fatal error, failed abort, a call that never returned): whether the batch
  committed is unknown, so the state of every assigned partition is restored from the
  changelog and the consumer rewinds to the committed offsets: snapshots and offsets commit
  together, so both say the same thing, exactly as for a new owner after a rebalance;
- fenced: another process owns this ``ES_SCHED_RUN_INSTANCE``; the role stops with an
  ``InfrastructureError`` naming the transactional id.

Refusals: a record that does not decode, is over the size cap or sits under a key that is not
its workflow id (``domain.intake``, the rule the audit checks by too) goes to ``dead-letters``
with its origin; a decoded input that cannot be applied
is answered by an event (``command.rejected`` in a history, or ``workflow.rejected`` outside
any history for a workflow id that has none: ADR 11), never a dead letter.

State: restored from the compacted changelog on assignment, every assigned partition in one
read (the restore rate is logged; a broker outage during it is waited out), dropped on
revocation. Static group membership (ADR 21, ``ES_SCHED_RUN_STATIC_MEMBERSHIP``): the group
member is ``group.instance.id`` = the transactional id, so a decider restarted under the same
instance gets its partitions back without a rebalance; a stopped one keeps them until it returns
or its session times out, and a second live process with its instance fences it (it stops).
Duplicate inputs are no-ops (``decide`` remembers input ids). Bounded (ADR 18): a workflow ended
``ES_SCHED_RUN_RETAIN_FINISHED_S`` ago is forgotten in a batch's transaction (a tombstone and an
ended marker, ``runtime.retirement``), and a late input for it is answered from the marker
(``domain.retention.answer_ended``), never by a restore. Snapshots name their definition bundle
by hash; the bundle is written once per changelog partition.

Learned run times (ADR 65): with a ``stats`` factory the role keeps a ``StatsView`` of the
stats topic while it runs and hands its ``runtime`` lookup to ``decide``, which records the
figure a dynamic timeout used in ``task.scheduled``; a restore, replay and the audit read that
record, never the view.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from confluent_kafka import Consumer, Message, TopicPartition

from es_sched.domain import commands as c
from es_sched.domain.decide import decide_with_state
from es_sched.domain.events import TaskRequeued, WorkflowSlaAtRisk, WorkflowSlaBreached
from es_sched.domain.intake import input_refusal, record_refusal
from es_sched.domain.pins import complete_start
from es_sched.domain.retention import answer_ended
from es_sched.domain.scripts import ScriptEngine
from es_sched.domain.state import WorkflowState
from es_sched.errors import EsSchedError, InfrastructureError, ScriptSandboxUnavailable
from es_sched.kafka.clients import KafkaClients, read_partitions
from es_sched.kafka.connection import connection
from es_sched.kafka.dead_letters import headers_for
from es_sched.kafka.failures import assign_at_committed, seek_to_committed, wait
from es_sched.kafka.registry import DefinitionRegistry
from es_sched.kafka.static_membership import StaticMember, rejoining
from es_sched.kafka.stats import StatsView
from es_sched.kafka.successor import Successor
from es_sched.kafka.topics import ensure_topics, topics_for
from es_sched.kafka.transactional import TransactionalLoop
from es_sched.kafka.txn_role import Batch, BatchSizer
from es_sched.metrics import LagGauge, Registry
from es_sched.runtime.decider_states import KeptStates
from es_sched.runtime.outbox import Record, chunk_tombstones, outbound, refused, snapshot
from es_sched.runtime.retirement import Retirement
from es_sched.serialization import decode_input
from es_sched.serialization.changelog import Changelog
from es_sched.serialization.chunks import chunk_count
from es_sched.settings import Settings
from es_sched.tuning import collector_paused, tune_gc, tune_switch

log = logging.getLogger("es_sched.decider")
RESTORE_RETRY_S = 2.0


def _utcnow() -> datetime:
    return datetime.now(UTC)


class Decider:
    def __init__(
        self,
        settings: Settings,
        scripts: ScriptEngine,
        clock: Callable[[], datetime] = _utcnow,
        new_id: Callable[[], str] = lambda: uuid.uuid4().hex,
        registry: Registry | None = None,
        clients: KafkaClients | None = None,
        stats: Callable[[], StatsView] | None = None,
    ) -> None:
        self.settings, self.scripts, self.clock, self.new_id = settings, scripts, clock, new_id
        self.stats_view_of = stats  # None: nothing learned, every dynamic timeout static
        self.stats_view: StatsView | None = None
        self.run_settings = settings.runtime
        self.topics = topics_for(settings)
        self.bootstrap = connection(settings.kafka)
        self.clients = clients or KafkaClients(self.bootstrap)
        self.group = f"{settings.kafka.topic_prefix}-decider"
        self.instance = settings.runtime.instance
        self.txn_id = f"{settings.kafka.topic_prefix}-decider-{self.instance}"
        self.member = StaticMember(self.group, self.txn_id, settings.runtime.static_membership)
        self.states = KeptStates()  # decoded, or resting as read (ADR 52)
        self.partition_of: dict[str, int] = {}
        self.bundles_on: dict[int, set[str]] = {}  # definition bundles each partition holds
        self.retirement = Retirement(
            self.topics, self.run_settings.retain_finished_s, self.run_settings.batch_max_records
        )
        self.chunks: dict[str, int] = {}  # chunk records of each large snapshot (ADR 19)
        self.batches = 0
        self.stats = {
            "inputs": 0,
            "events": 0,
            "dead_letters": 0,
            "aborts": 0,
            "batches": 0,
            "requeues": 0,
            "refusals": 0,
            "retired": 0,
        }
        r = self.metrics = registry or Registry()
        self.m_counts = {
            k: r.counter(f"es_sched_decider_{k}_total", f"Decider {k.replace('_', ' ')}.")
            for k in self.stats
        }
        self.m_batch = r.histogram(
            "es_sched_decider_batch_seconds", "One poll batch: decide, produce, commit."
        )
        self.m_workflows = r.gauge("es_sched_decider_workflows", "Workflow states held.")
        self.m_sla = r.counter(
            "es_sched_sla_events_total",
            "workflow.sla_at_risk and workflow.sla_breached events decided, by kind and tier "
            "(ADR 67).",
        )
        self.m_ended = r.gauge("es_sched_decider_ended_markers", "Retired workflows' markers.")
        self.lag = LagGauge(r, "decider")
        self.loop = TransactionalLoop(
            self.clients,
            self.txn_id,
            "decider",
            settings.runtime.transaction_timeout_ms,
            registry=r,
            prompt=True,
            brokers_away_at=lambda: self.member.trouble_at,
        )
        self._stop = threading.Event()
        # Ends the open transaction of a decider dropped from the group with our new
        # partitions (ADR 79); its group.instance.id is needed to tell, so static members only.
        self.successor: Successor | None = None
        if self.member.enabled and settings.runtime.end_orphaned_transactions:
            prefix = f"{settings.kafka.topic_prefix}-decider-"
            self.successor = Successor(
                self.clients, self.topics.system, self.group, prefix, "decider", self.instance
            )

    # -- lifecycle -------------------------------------------------------------------------
    def run(self, stop: threading.Event) -> None:
        self._stop = stop
        tune_gc(self.run_settings.gc_young_threshold)
        tune_switch(self.run_settings.switch_interval_us)
        ensure_topics(self.bootstrap, self.topics)
        self.registry = DefinitionRegistry(self.bootstrap, self.topics.definitions)
        self.registry.catch_up()
        self.stats_view = self.stats_view_of() if self.stats_view_of is not None else None
        if self.successor is not None:
            self.successor.prepare()  # the roster read while the group assigns
        try:
            rejoining(stop, self.member, lambda: self._session(stop), self._drop_all)
        finally:
            self.registry.close()
            if self.successor is not None:
                self.successor.close()
            if self.stats_view is not None:
                self.stats_view.close()
            log.info("decider %s stopped: %s", self.txn_id, self.stats)

    def _session(self, stop: threading.Event) -> None:
        """One group membership: a consumer subscribed, the loop until stopped (or fenced)."""
        self.consumer: Consumer = self.clients.consumer(
            self.group,
            # range: partition p of both input topics goes to one member (one changelog p).
            # A short session lets the group notice a killed decider in seconds; a static
            # member restarted under the same instance does not wait for it at all (ADR 21).
            **{
                "partition.assignment.strategy": "range",
                "session.timeout.ms": 10_000,
                "heartbeat.interval.ms": 2_000,
            },
            **self.member.config(),
        )
        self.consumer.subscribe(
            [self.topics.commands, self.topics.task_results],
            on_assign=self._on_assign,
            on_revoke=self._on_revoke,
            on_lost=self._on_revoke,
        )
        log.info("decider %s started (group %s)", self.txn_id, self.group)
        try:
            rs = self.run_settings
            sizer = BatchSizer(
                rs.batch_max_records, rs.batch_ceiling_records, rs.batch_budget_ms / 1000
            )
            self.loop.run(
                stop, self.consumer, self, rs.batch_max_records, rs.batch_max_ms / 1000, sizer
            )
        finally:
            self.consumer.close()

    def _drop_all(self) -> None:
        self._drop(set(range(self.topics.partitions)))

    def tick(self) -> None:
        if self.lag.update(self.consumer):  # once a second
            for k, counter in self.m_counts.items():
                counter.inc(self.stats[k] - counter.value())
            self.m_workflows.set(len(self.states))
            self.m_ended.set(len(self.retirement.ended))

    # -- partitions ------------------------------------------------------------------------
    def _on_assign(self, cons: Consumer, partitions: list[TopicPartition]) -> None:
        numbers = {tp.partition for tp in partitions}
        log.info("assigned partitions %s", sorted(numbers))
        if self.successor is not None:  # before any read_committed read of them
            self.successor.end(f"{self.topics.commands}[{n}]" for n in sorted(numbers))
        self._restore(numbers)
        assign_at_committed(cons, partitions, self._stop)

    def _restore(self, numbers: set[int]) -> None:
        """The partitions' states from their changelog partitions, read together by one
        consumer (ADR 21); a broker outage is waited out (a role must not die of a broker
        restart), ``Stopped`` ends the wait when the role stops."""
        if not numbers:
            return
        while True:
            try:
                self._restore_partitions(numbers)
                return
            except InfrastructureError as exc:
                log.warning("restoring partitions %s: %s; trying again", sorted(numbers), exc)
                wait(self._stop, RESTORE_RETRY_S)

    def _restore_partitions(self, numbers: set[int]) -> None:
        self._drop(numbers)  # a retry starts from a clean slate
        with collector_paused():  # builds only states it keeps (es_sched.tuning)
            self._restore_read(numbers)

    def _restore_read(self, numbers: set[int]) -> None:
        started = time.monotonic()
        found = {number: Changelog() for number in numbers}
        for msg in read_partitions(self.bootstrap, self.topics.changelog, numbers):
            key, value = (msg.key() or b""), msg.value()
            found[msg.partition() or 0].feed(
                key.decode() if isinstance(key, bytes) else key,
                value.encode() if isinstance(value, str) else value,
                msg.headers(),
            )
        took = time.monotonic() - started
        records = sum(read.records for read in found.values())
        for number in sorted(numbers):  # each line gets its records' share of the read's time
            share = took * found[number].records / records if records else took / len(numbers)
            self._keep_restored(number, found[number], share)
        took = time.monotonic() - started  # read and decoded: the partitions can decide now
        log.info(
            "restored %d partitions: %d records in %.2fs (%.0f records/s)",
            len(numbers),
            records,
            took,
            records / took if took > 0 else 0.0,
        )

    def _keep_restored(self, number: int, found: Changelog, read_s: float) -> None:
        """One partition's changelog into memory: ended workflows resting, the rest decoded
        (ADR 52); its line's time is its share of the read plus the decoding."""
        started, resting = time.monotonic(), self.states.resting
        for st in found.kept():
            self.states.keep(st)
            self.partition_of[st.workflow_id] = number
            self.chunks[st.workflow_id] = chunk_count(found.latest.get(st.workflow_id))
            self.retirement.watch(st)
        for gone in found.ended.values():
            self.retirement.ended.add(number, gone)
        self.bundles_on[number] = set(found.bundles)
        live = len(found.latest) - sum(wf in found.ended for wf in found.latest)
        took = read_s + time.monotonic() - started
        log.info(
            "restored partition %d: %d records, %d live states (%d resting), %d ended markers "
            "in %.2fs (%.0f records/s)",
            number,
            found.records,
            live,
            self.states.resting - resting,
            len(found.ended),
            took,
            found.records / took if took > 0 else 0.0,
        )

    def _drop(self, numbers: set[int]) -> None:
        for wf in [wf for wf, p in self.partition_of.items() if p in numbers]:
            self.states.pop(wf)
            self.partition_of.pop(wf, None)
            self.chunks.pop(wf, None)
        self.retirement.ended.drop(numbers)
        for number in numbers:
            self.bundles_on.pop(number, None)

    def _on_revoke(self, cons: Consumer, partitions: list[TopicPartition]) -> None:
        gone = {tp.partition for tp in partitions}
        self._drop(gone)
        log.info("revoked partitions %s", sorted(gone))

    # -- one batch (the loop's step and rewind) --------------------------------------------
    def step(self, msgs: list[Message]) -> Batch | None:
        """Decide a poll batch; its state changes are staged until the transaction commits."""
        self.registry.poll()
        started, now = time.monotonic(), self.clock()
        staged: dict[str, WorkflowState] = {}
        staged_partition: dict[str, int] = {}
        records: list[Record] = []
        offsets: dict[tuple[str, int], int] = {}
        for msg in msgs:
            offsets[(msg.topic() or "", msg.partition() or 0)] = (msg.offset() or 0) + 1
            records += self.handle(msg, staged, staged_partition)
        bundles = {p: set(self.bundles_on.get(p, ())) for p in set(staged_partition.values())}
        chunks: dict[str, int] = {}
        for wf, st in staged.items():
            part = staged_partition[wf]
            written, chunks[wf] = snapshot(
                self.topics, st, part, bundles[part], self.chunks.get(wf, 0)
            )
            records += written
        retiring, picked = self.retirement.pick(now, self.states, staged, self.partition_of)
        records += retiring
        for part, gone in picked:  # a retired large snapshot: its chunks go too
            wf = gone.workflow_id
            records += chunk_tombstones(self.topics, wf, part, 0, self.chunks.get(wf, 0))
        if not records and not offsets:
            return None

        def keep() -> None:
            for wf, st in staged.items():
                before = self.states.get(wf)
                if st.terminal and (before is None or not before.terminal):
                    self.retirement.watch(st)
            self.states.update(staged)
            self.chunks.update(chunks)
            self.partition_of.update(staged_partition)
            for part, held in bundles.items():
                self.bundles_on.setdefault(part, set()).update(held)
            self.retirement.forget(picked, self.states, self.partition_of)
            for _, gone in picked:
                self.chunks.pop(gone.workflow_id, None)
            self.stats["retired"] += len(picked)
            self.batches += 1
            self.stats["batches"] = self.batches
            self.m_batch.observe(time.monotonic() - started)

        return Batch(records, offsets, keep)

    def rewind(self, producer_lost: bool) -> None:
        """Back to the committed offsets: the batch will be read and decided again."""
        self.stats["aborts"] += 1
        self.retirement.unpick()
        if producer_lost:  # it may have committed: rebuild the states as a new owner would
            numbers = {tp.partition for tp in self.consumer.assignment()}
            log.warning("rebuilding partitions %s from the changelog", sorted(numbers))
            self._restore(numbers)
        seek_to_committed(self.consumer, self._stop)

    def handle(
        self, msg: Message, staged: dict[str, WorkflowState], where: dict[str, int]
    ) -> list[Record]:
        raw = msg.value()
        data = raw if isinstance(raw, bytes) else (raw or "").encode()
        refused_bytes = record_refusal(data, self.run_settings.command_max_bytes)
        if refused_bytes is not None:  # judged on its bytes: an oversize record is not decoded
            return [self._dead(msg, refused_bytes, "SchemaError")]
        try:
            inp = decode_input(data)
            key = msg.key()
            key_text = key.decode() if isinstance(key, bytes) else (key or "")
            refused_here = input_refusal(key_text, inp)  # the rule the audit checks by too
            if refused_here is not None:
                raise EsSchedError(refused_here)
            inp = self._complete_start(inp)
            st = staged.get(inp.workflow_id) or self.states.get(inp.workflow_id)
            gone = self.retirement.ended.get(inp.workflow_id) if st is None else None
            if gone is not None:  # retired (ADR 18): answered from its marker, no restore
                answer = answer_ended(gone, inp, self.clock())
                self.stats["refusals"] += len(answer)
                return refused(self.topics, answer)
            learned = self.stats_view.runtime if self.stats_view is not None else None
            events, new = decide_with_state(
                st, inp, self.clock(), self.new_id, self.scripts, learned
            )
        except ScriptSandboxUnavailable:
            raise  # the host's fault, not the input's: the batch is not committed (ADR 76)
        except EsSchedError as exc:
            return [self._dead(msg, str(exc), type(exc).__name__)]
        self.stats["inputs"] += 1
        if new is None:  # refused outside any history (ADR 11): the event is the answer
            self.stats["refusals"] += len(events)
            return refused(self.topics, events)
        if not events:
            return []
        self.stats["events"] += len(events)
        self.stats["requeues"] += sum(isinstance(e.payload, TaskRequeued) for e in events)
        for e in events:
            if isinstance(e.payload, WorkflowSlaAtRisk | WorkflowSlaBreached):
                tier = e.payload.sla_tier or "none"
                self.m_sla.inc(kind=e.payload.TYPE.removeprefix("workflow."), tier=tier)
        staged[new.workflow_id] = new
        part = where[new.workflow_id] = msg.partition() or 0
        requeue_after = self.run_settings.requeue_after_s
        return outbound(self.topics, new, events, self.resolve, requeue_after, part)

    def _complete_start(self, inp: c.Input) -> c.Input:
        if not isinstance(inp, c.StartWorkflow):
            return inp
        found = complete_start(inp, self.resolve)  # pins its children's versions (ADR 12)
        if found is None:
            return inp  # the core refuses it with workflow.rejected (a duplicate: nothing)
        return found

    def resolve(
        self, name: str, version: int | None
    ) -> tuple[dict[str, Any], list[dict[str, Any]]] | None:
        definition = self.registry.workflow(name, version)
        if definition is None:
            return None
        return definition, self.registry.taskdefs_for(definition)

    def _dead(self, msg: Message, reason: str, error_class: str) -> Record:
        self.stats["dead_letters"] += 1
        key = msg.key()
        key_text = key.decode(errors="replace") if isinstance(key, bytes) else (key or "")
        raw = msg.value()
        log.warning(
            "dead letter from %s[%s]@%s: %s", msg.topic(), msg.partition(), msg.offset(), reason
        )
        return Record(
            self.topics.dead_letters,
            key_text,
            raw if isinstance(raw, bytes) or raw is None else raw.encode(),
            headers_for(msg, reason, error_class, "decider"),
        )
