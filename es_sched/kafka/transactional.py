"""The exactly-once loop: consume, transform, produce in Kafka transactions, for every role.

The decider, the timer service and the retry relay (``es_sched.runtime``) each give the loop a
``TransactionalRole`` (``es_sched.kafka.txn_role``): a ``step`` from input records to a
``Batch`` and two hooks. The loop owns the transactional producer (``transactional.id`` = the
role's id, one per running process).

Each iteration: up to ``max_records`` from the role's group consumer (consumer errors
are not records: ``_PARTITION_EOF`` is dropped, a fatal error raises ``InfrastructureError``, the
rest is logged; a static member fenced by another process with its ``group.instance.id`` (its
transactional id, ADR 21) stops the role as a fenced producer does), ``role.step(records)``, and
when it returns a ``Batch``, ONE transaction: begin, produce every record,
``send_offsets_to_transaction`` with the consumer's group metadata (KIP-447: the group coordinator
fences a zombie of an older generation), commit. Offsets are committed only there, then
``batch.on_commit()`` keeps the role's staged state. ``role.tick()`` ends the iteration.

Guarantee: a batch's outputs and input offsets commit atomically; ``read_committed`` readers see
each output once, or not at all until the role decides the batch again.

Failures, classified by ``es_sched.kafka.failures.classify`` (librdkafka's transactional error
handling: INTRODUCTION.md and ``rdkafka.h``):

- retriable: the same call again (``send_offsets_to_transaction`` with identical offsets and
  metadata, as ``rdkafka.h`` asks), each try bounded, until the transaction timeout has passed
  (the coordinator aborts the transaction then anyway); after that it counts as abortable.
  Except ``_CONFLICT`` (another call, our timed-out commit, still runs): counted as fatal.
- abortable: ``abort_transaction``, then ``role.rewind(producer_lost=False)``: the batch is
  known not to be committed.
- fenced: ``Fenced`` naming the transactional id; the role stops, or rejoins when its
  consumer saw the broker away before the fence (``kafka/static_membership.py``: a twin
  arrives out of a quiet sky, the coordinator's abort after a pause does not). Except once the
  transaction has
  outlived its timeout: the coordinator's abort fences the old epoch too, so that fence counts
  as fatal (``_timed_out``); a twin started meanwhile is fenced back by the new producer and
  stops (one of the two runs on, never both).
- fatal, a failed abort, or a call that never returns: the producer is left behind and a new
  one initialised (``init_transactions`` fences our older epoch and completes or aborts its
  open transaction), then ``role.rewind(producer_lost=True)``: the batch may have committed or
  not, so the role rebuilds from the log whatever depends on the outcome.
- a producer that lived through a broker outage (its consumer lost the brokers since the
  producer was made) is replaced before the next transaction, none being open: after a broker's
  kill -9 and restart, the first ``send_offsets_to_transaction`` of the old producer never
  returned (librdkafka #5456) and the decider wrote nothing for 15 s, its call limit and grace.
  A new producer costs one ``init_transactions``.
- stopped (the stop flag) while a transaction fails: ``run`` returns and leaves it open; the
  coordinator aborts it after the transaction timeout, or the next owner's
  ``init_transactions`` does at once.

Never an unbounded block. ``send_offsets_to_transaction`` waits without limit for its group
coordinator leg (librdkafka #5456 "ignores timeout", #5511 "hangs when the group coordinator is
decommissioned"); a kill -9 of the broker under load reproduced that here with librdkafka 2.16.
So blocking calls run on a daemon thread of their producer and are given up after their timeout
plus a grace (the stuck thread keeps the abandoned producer), and the stop flag is checked
between tries: a stopped role returns within about one call timeout, broker or no broker.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Sequence

from confluent_kafka import KafkaError, KafkaException, Message, TopicPartition

from es_sched.errors import InfrastructureError
from es_sched.kafka.bounded_caller import BoundedCaller, Wedged
from es_sched.kafka.failures import (
    BROKER_AWAY,
    GroupConsumer,
    Kind,
    Stopped,
    classify,
    consumer_fatal,
    error_of,
    instance_fenced,
    wait,
)
from es_sched.kafka.static_membership import TROUBLE_WINDOW_S, Fenced
from es_sched.kafka.txn_role import (
    TP,
    Batch,
    BatchSizer,
    Outgoing,
    ProducerFactory,
    TransactionalRole,
    TxnProducer,
)
from es_sched.metrics import Registry

log = logging.getLogger(__name__)
RETRY_PAUSE_S = 0.2  # rdkafka.h: retry "preferably after a shorter grace period"
ERROR_LOG_EVERY_S = 10.0


class _Failed(Exception):
    """A transaction step failed; ``kind`` says how to recover, ``wedged`` that the call never
    returned (the producer is stuck, not necessarily broken for good)."""

    def __init__(self, kind: Kind, reason: str, wedged: bool = False, fence: bool = False) -> None:
        super().__init__(reason)
        self.kind, self.reason, self.wedged = kind, reason, wedged
        # FENCED_INSTANCE_ID from a transaction call (``send_offsets_to_transaction``): the
        # consumer's fence showing through the producer first, not trouble before it.
        self.instance_fence = fence


class TransactionalLoop:
    def __init__(
        self,
        clients: ProducerFactory,
        transactional_id: str,
        role: str,
        transaction_timeout_ms: int,
        call_timeout_s: float = 10.0,
        grace_s: float = 5.0,
        registry: Registry | None = None,
        prompt: bool = False,
        brokers_away_at: Callable[[], float] = lambda: -math.inf,
    ) -> None:
        """``brokers_away_at``: when (``time.monotonic``) the role's consumer last saw its
        brokers away; librdkafka logs a lost connection, ``consume`` does not return it
        (``StaticMember.trouble_at``)."""
        self.clients, self.txn_id, self.role = clients, transactional_id, role
        self.brokers_away_at = brokers_away_at
        self.prompt = prompt  # the decider's (ADR 41): a transaction as soon as input comes
        self.txn_s, self.grace_s = transaction_timeout_ms / 1000, grace_s
        self.call_timeout_s = min(call_timeout_s, self.txn_s)
        self._config = {"transaction.timeout.ms": transaction_timeout_ms}
        self._producer: TxnProducer | None = None
        self._caller: BoundedCaller | None = None
        self._errors_at, self._errors_quiet = 0.0, 0
        self._trouble_at = -math.inf  # the last consumer error, retried call or failed txn
        self._away_at = -math.inf  # the last lost-brokers error ``consume`` returned
        self._opened_at = math.inf  # when the producer in use finished init_transactions
        r = registry or Registry()
        self.m_commits = r.counter("es_sched_txn_commits_total", "Transactions committed.")
        self.m_aborts = r.counter("es_sched_txn_aborts_total", "Transactions aborted or lost.")
        self.m_retries = r.counter("es_sched_txn_retries_total", "Retriable errors retried.")
        restarts = "es_sched_txn_producer_restarts_total", "Transactional producers re-created."
        self.m_restarts = r.counter(*restarts)

    # -- the loop ---------------------------------------------------------------------------
    def run(
        self,
        stop: threading.Event,
        consumer: GroupConsumer,
        role: TransactionalRole,
        max_records: int,
        wait_s: float,
        sizer: BatchSizer | None = None,
    ) -> None:
        """Until ``stop`` is set; raises ``InfrastructureError`` when fenced or Kafka is broken.
        ``sizer``: adaptive batches (``BatchSizer``); without one, always ``max_records``."""
        sizer = sizer or BatchSizer(max_records)
        try:
            self._open(stop, first=True)
            while not stop.is_set():
                records = self.poll(consumer, sizer.size, wait_s)
                started = time.monotonic()
                batch = role.step(records)
                if batch is not None:
                    self.transact(stop, consumer, role, batch)
                sizer.observe(len(records), time.monotonic() - started)
                role.tick()
        except Stopped as why:
            log.info("%s %s stopping: %s", self.role, self.txn_id, why)
        finally:
            self._retire()

    def poll(self, consumer: GroupConsumer, max_records: int, wait_s: float) -> list[Message]:
        """``prompt``: up to ``wait_s`` for the first record, then what else came, without
        waiting (a batch short of ``max_records`` would take all of ``wait_s``, a wait on every
        decider step at light load: ADR 41); else a window of ``wait_s``, a transaction per
        window."""
        got = consumer.consume(1 if self.prompt else max_records, wait_s)
        if self.prompt and got and max_records > 1:
            got += consumer.consume(max_records - 1, 0)
        out: list[Message] = []
        for msg in got:
            err = msg.error()
            if err is None:
                out.append(msg)
            elif instance_fenced(err):
                # a twin or a self-fence: kafka/static_membership.py tells them apart
                quiet_s = time.monotonic() - self._trouble_at
                what = f"group.instance.id {self.txn_id!r}: {err}"
                raise self._fenced(what, after_trouble=quiet_s < TROUBLE_WINDOW_S)
            elif consumer_fatal(err):
                raise InfrastructureError(f"{self.role} consumer: {err}")
            elif err.code() != KafkaError._PARTITION_EOF:
                self._consumer_error(err)
        return out

    def _consumer_error(self, err: KafkaError) -> None:
        # A broker away repeats its transport errors many times a second: one line per
        # ERROR_LOG_EVERY_S.
        now = self._trouble_at = time.monotonic()
        if err.code() in BROKER_AWAY:
            self._away_at = now
        if now - self._errors_at < ERROR_LOG_EVERY_S:
            self._errors_quiet += 1
            return
        more = f" ({self._errors_quiet} more since the last)" if self._errors_quiet else ""
        log.warning("%s consumer: %s%s", self.role, err, more)
        self._errors_at, self._errors_quiet = now, 0

    # -- one transaction --------------------------------------------------------------------
    def transact(
        self, stop: threading.Event, consumer: GroupConsumer, role: TransactionalRole, batch: Batch
    ) -> bool:
        """Commit ``batch``; on failure recover (see the module docstring) and return False."""
        if max(self._away_at, self.brokers_away_at()) > self._opened_at:
            log.warning(
                "%s %s: the brokers were away since this producer was made; a new one first",
                self.role,
                self.txn_id,
            )
            self._open(stop, first=False)
        deadline = time.monotonic() + self.txn_s
        p = self._producer
        assert p is not None, "run() opens the producer first"
        try:
            self._begin_and_produce(p, batch.records, deadline, stop)
            offsets = batch.offsets if batch.offsets is not None else _positions(consumer)
            if offsets:
                tps = [TopicPartition(t, n, o) for (t, n), o in sorted(offsets.items())]
                meta = consumer.consumer_group_metadata()  # the same on every retry
                self._call(
                    "send_offsets_to_transaction",
                    lambda t: p.send_offsets_to_transaction(tps, meta, t),
                    deadline,
                    stop,
                )
            self._call("commit_transaction", p.commit_transaction, deadline, stop)
        except _Failed as failed:
            self._recover(failed, stop, role, deadline)
            return False
        self.m_commits.inc(role=self.role)
        batch.on_commit()
        return True

    def _begin_and_produce(
        self, p: TxnProducer, records: Sequence[Outgoing], deadline: float, stop: threading.Event
    ) -> None:
        try:
            p.begin_transaction()
            for r in records:
                part = -1 if r.partition is None else r.partition
                while True:
                    try:
                        p.produce(r.topic, r.value, r.key, part, headers=r.headers)
                        break
                    except BufferError:  # the local queue is full: let deliveries drain
                        if stop.is_set() or time.monotonic() > deadline:
                            full = "the producer queue stayed full"
                            raise _Failed(Kind.ABORTABLE, full) from None
                        p.poll(0.05)
        except KafkaException as exc:
            err = error_of(exc)
            kind = Kind.FATAL if err is None else classify(err)
            # produce() raises bare codes without the abortable flag (e.g. once the transaction
            # has failed); an abort is the cheaper first answer, a failed abort escalates.
            if kind is Kind.FATAL and err is not None and not err.fatal():
                kind = Kind.ABORTABLE
            raise _Failed(kind, f"begin/produce: {exc}") from None

    def _call(
        self,
        what: str,
        fn: Callable[[float], object],
        deadline: float,
        stop: threading.Event,
    ) -> None:
        """``fn(timeout)`` on the producer's thread, retried while retriable and time is left."""
        caller = self._caller
        assert caller is not None
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                late = f"{what}: still failing after the transaction timeout"
                raise _Failed(Kind.ABORTABLE, late)
            limit = min(self.call_timeout_s, left)
            try:
                caller.call(fn, limit, self.grace_s)
                return
            except Wedged:
                reason = f"{what} did not return within {limit + self.grace_s:.0f}s"
                raise _Failed(Kind.FATAL, reason, wedged=True) from None
            except KafkaException as exc:
                err = error_of(exc)
                kind = Kind.FATAL if err is None else classify(err)
                if err is not None and err.code() == KafkaError._CONFLICT:
                    # Retriable in name only: our timed-out commit still runs, so this abort
                    # cannot succeed; give the producer up (its successor's init settles it).
                    kind = Kind.FATAL
                if kind is not Kind.RETRIABLE:
                    fence = err is not None and err.code() == KafkaError.FENCED_INSTANCE_ID
                    raise _Failed(kind, f"{what}: {exc}", fence=fence) from None
                # Trouble even if the retry succeeds: a coordinator's node killed may show only
                # as such retries, and a self-fence may follow (kafka/static_membership.py).
                self._trouble_at = time.monotonic()
                self.m_retries.inc(role=self.role)
                log.warning("%s %s: %s (retriable), trying again", self.role, what, err)
            if stop.wait(RETRY_PAUSE_S):
                raise _Failed(Kind.ABORTABLE, f"{what}: stopping")

    # -- recovery ---------------------------------------------------------------------------
    @staticmethod
    def _timed_out(failed: _Failed, deadline: float) -> _Failed:
        """A fence seen once the transaction has outlived its timeout is the coordinator's
        abort, not a twin: it aborts a timed-out transaction by bumping the producer epoch, so
        the old epoch's next call is refused as fenced (apache/kafka#12392; librdkafka#3297:
        "the transaction times out because the producer doesn't commit the transaction in
        time. This results in a producer fenced error", KIP-588). A process paused that long
        (SIGSTOP, a stalled VM) re-creates its producer like after a fatal error. Our clock
        starts before the coordinator's (at ``begin``, not its first AddPartitions), so a
        fence before our deadline cannot be the coordinator's: that one stays a twin's."""
        if failed.kind is not Kind.FENCED or time.monotonic() < deadline:
            return failed
        why = f"{failed.reason} (past the transaction timeout: the coordinator's abort)"
        return _Failed(Kind.FATAL, why)

    def _recover(
        self, failed: _Failed, stop: threading.Event, role: TransactionalRole, deadline: float
    ) -> None:
        """``deadline``: when the coordinator may abort the transaction (``_timed_out``)."""
        failed = self._timed_out(failed, deadline)
        # Only what came before a fence tells a self-fence (kafka/static_membership.py): the
        # fence itself is no trouble. A twin's fence may reach the producer before the consumer
        # (CI, stop 22: the aborted transaction counted as trouble, the decider rejoined and
        # fenced the twin instead of stopping).
        if failed.kind is Kind.FENCED:
            raise self._fenced(failed.reason) from None
        if not failed.instance_fence:
            self._trouble_at = time.monotonic()
        self.m_aborts.inc(role=self.role)
        if stop.is_set():
            # Leave the transaction open: the coordinator aborts it after the transaction
            # timeout, or the next owner's init_transactions does at once.
            raise Stopped(f"transaction not committed ({failed.reason})")
        lost = failed.kind is not Kind.ABORTABLE or not self._abort(failed, stop, deadline)
        if lost:
            log.error(
                "%s %s: %s; re-creating the transactional producer",
                self.role,
                self.txn_id,
                failed.reason,
            )
            self._open(stop, first=False)
        role.rewind(producer_lost=lost)

    def _abort(self, failed: _Failed, stop: threading.Event, txn_deadline: float) -> bool:
        p = self._producer
        assert p is not None
        try:
            deadline = time.monotonic() + self.txn_s
            self._call("abort_transaction", p.abort_transaction, deadline, stop)
        except _Failed as abort_failed:
            abort_failed = self._timed_out(abort_failed, txn_deadline)
            if abort_failed.kind is Kind.FENCED:
                raise self._fenced(abort_failed.reason) from None
            log.warning("%s %s: abort failed too (%s)", self.role, self.txn_id, abort_failed.reason)
            return False
        log.warning("%s %s: transaction aborted: %s", self.role, self.txn_id, failed.reason)
        return True

    def _fenced(self, reason: str, after_trouble: bool = False) -> Fenced:
        """The fence. A producer's is never ``after_trouble`` by the loop's own account: a
        rebalance aborts transactions too, and a twin may follow one. ``rejoining`` rejoins
        only when the consumer saw the broker away (``StaticMember.troubled``), as it does
        before the coordinator's abort of a transaction that outlived a broker's pause."""
        return Fenced(
            f"{self.role} stops: transactional.id {self.txn_id!r} was fenced, another process "
            f"took it (or its group.instance.id) after this one (ES_SCHED_RUN_INSTANCE must be "
            f"unique among running processes); {reason}",
            after_trouble=after_trouble,
        )

    def _open(self, stop: threading.Event, first: bool) -> None:
        """A new producer with ``init_transactions`` done; retried through broker outages.

        A fatal error of ``init_transactions`` on a fresh producer is a configuration or
        authorization problem when starting (raised at once); while recovering it is retried
        with new producers a few times first.
        """
        self._retire()
        delay, fatal_left = 0.5, 0 if first else 4
        while True:
            if stop.is_set():
                raise Stopped("no transactional producer yet")
            p = self.clients.producer(self.txn_id, **self._config)
            self._producer, self._caller = p, BoundedCaller(f"{self.role}-txn")
            try:
                # Resumable when retriable ("it is okay to call init_transactions() again").
                self._call("init_transactions", p.init_transactions, math.inf, stop)
            except _Failed as failed:
                self._retire()
                if stop.is_set():
                    raise Stopped("no transactional producer yet") from None
                if failed.kind is Kind.FENCED:
                    raise self._fenced(failed.reason) from None
                if not failed.wedged:
                    if fatal_left <= 0:
                        raise InfrastructureError(
                            f"{self.role} producer {self.txn_id!r}: {failed.reason}"
                        ) from None
                    fatal_left -= 1
                log.warning("%s: %s; another producer in %.1fs", self.role, failed.reason, delay)
                wait(stop, delay)
                delay = min(5.0, delay * 2)
                continue
            if not first:
                self.m_restarts.inc(role=self.role)
            self._opened_at = time.monotonic()
            return

    def _retire(self) -> None:
        caller, producer = self._caller, self._producer
        self._producer, self._caller = None, None
        if caller is not None and producer is not None:
            caller.retire(lambda: _close(producer))


def _positions(consumer: GroupConsumer) -> dict[TP, int]:
    positions = consumer.position(consumer.assignment())
    return {(tp.topic, tp.partition): tp.offset for tp in positions if tp.offset >= 0}


def _close(producer: TxnProducer) -> None:
    # On its caller's thread (``_retire``); after ``close`` its destructor cannot block.
    try:
        producer.purge()
        producer.close()
    except (KafkaException, RuntimeError) as exc:
        log.debug("closing an abandoned producer: %s", exc)
