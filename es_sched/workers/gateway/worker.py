"""The gateway worker: one per API process, leasing tasks for the HTTP workers that poll it.

To the dispatcher it is a worker like any other (ADR 23, 24): it reads its partition of
``<prefix>.assignments``, heartbeats a ``WorkerStatus`` listing every task it holds, and its
leases are fenced and expire like any worker's. It is built from the worker SDK's Kafka edge
(``es_sched.workers.runner.AssignmentReader``; ``es_sched.workers.reports``: ``Reporter``, the
report builders) and its never-start-a-stale-lease rules (``StaleLeases``), not from
``Worker``: a ``Worker`` runs handlers in its own threads, here an HTTP request takes the task
and another request, maybe on another API process, ends it. Like a ``Worker`` it makes a key
at start and publishes it in its status; the dispatcher seals each lease token to it
(ADR 74), this process opens it on reading, and the clear token lives only in the gateway
store and the reports written for HTTP workers, never in a poll's answer.

Demand (ADR 24 a, ADR 34; the rules in ``es_sched.workers.gateway.demand``): the status announces
only the task types HTTP workers still ask this process for, and room for only as many tasks
as they asked for (the ``count`` of their polls) beyond those it holds, capped by
``capacity``. A poll that finds nothing sends a status at once, so the dispatcher hears of the
demand within its tick rather than a heartbeat. A task leased but not taken by any poll while
its type is idle here (no request within the type's patience, no long poll waiting) is handed
back with ``worker.task_declined``: the decider ends the lease as an expiry, so the task is
queued again with its attempt kept, and the gateway drops it from its status. The idle check
runs every ``IDLE_CHECK_S`` in memory; the store is read only at heartbeats.

A task taken by a poll is reported started (``worker.task_started`` with the gateway's lease)
and stays in the status until some API process records its outcome in the gateway store
(``leases.LeaseStore``); this gateway learns that at its next heartbeat.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO

from confluent_kafka import Message

from es_sched.errors import SchemaError
from es_sched.kafka.connection import connection
from es_sched.kafka.topics import assignment_topic, topics_for
from es_sched.roster import same_deployment
from es_sched.serialization import sealed, wire
from es_sched.settings import Settings
from es_sched.workers import reports, runner
from es_sched.workers.admission import use_of
from es_sched.workers.gateway.demand import Demand
from es_sched.workers.gateway.leases import LeaseStore, as_assignment
from es_sched.workers.stale import Stale, StaleLeases

log = logging.getLogger(__name__)
NOT_POLLED = (
    "gateway: no HTTP worker asked this API process for this task type for {s:.2g}s; handed back"
)
POLL_DATA_EVERY_S = 1.0
KICK_EVERY_S = 0.1  # the least time between two statuses sent for new demand
IDLE_CHECK_S = 0.1  # how often idle types are looked for (in memory: no I/O)
# The gateway does not run the tasks: resources bound nothing but what its pollers can take.
UNBOUNDED_CPU, UNBOUNDED_MEMORY_MB = 1e9, 1 << 40


def gateway_id(settings: Settings, port: int | None = None) -> str:
    """Stable across restarts of one API process (host and listening port), so its committed
    position on the assignments partition is resumed; ``gateway.slot`` adds the process's slot
    when several share the port."""
    return f"api-gateway-{socket.gethostname()}-{port or settings.api.port}"


@dataclass
class _Held:
    assignment: wire.Assignment
    since: float  # monotonic, when read
    offset: int = -1  # on the assignments partition: the position is committed up to it


@dataclass
class Claim:
    """What one poll claimed of the held tasks, before any I/O (``Gateway.claim``)."""

    at: float
    took: list[wire.Assignment] = field(default_factory=list)
    skipped: list[tuple[wire.Assignment, Stale]] = field(default_factory=list)

    @property
    def needs_io(self) -> bool:
        return bool(self.took or self.skipped)


class Gateway:
    def __init__(
        self,
        settings: Settings,
        store: LeaseStore,
        worker_id: str | None = None,
        pool: str = "default",
        slot: IO[bytes] | None = None,
    ) -> None:
        self.settings, self.store, self.pool = settings, store, pool
        self._slot = slot  # the lock that keeps worker_id this process's (gateway.slot)
        self.worker_id = worker_id or gateway_id(settings)
        self.capacity = settings.api.gateway_capacity
        self.demand_s = settings.api.gateway_demand_s
        self.heartbeat_s = settings.dispatch.heartbeat_s
        # No linger: an HTTP update answers only once its report is delivered, so the linger
        # every other producer waits to fill a batch would be most of that wait
        # (bench/api_workers.py); concurrent updates still share a request while one is in
        # flight.
        self.reporter = reports.Reporter(
            connection(settings.kafka), topics_for(settings), **{"linger.ms": 0}
        )
        self.ready = threading.Event()
        self._lock = threading.Lock()
        self._waiting: dict[str, _Held] = {}  # leased, no poll took it yet (arrival order)
        self._taken: dict[str, wire.Assignment] = {}  # handed to an HTTP worker
        self.demand = Demand(self.demand_s)
        self._wakers: dict[Callable[[], None], str] = {}  # long polls waiting -> their type
        self._poll_written: dict[tuple[str, str, str], float] = {}
        self._stale = StaleLeases(self.heartbeat_s)
        # This process's key (ADR 74): the tokens it opens stay in the API's gateway store and
        # in the reports it writes for HTTP workers, never in what a poll answers.
        self.lease_key = sealed.LeaseKey()
        self._kick = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="es-sched-gateway", daemon=True)

    # -- what the routes call -----------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def take(
        self, task_type: str, count: int, http_worker: str, next_of_update: bool = False
    ) -> list[wire.Assignment]:
        """Up to ``count`` held tasks of ``task_type`` for ``http_worker`` (``claim``, ``hand``)."""
        return self.hand(self.claim(task_type, count, http_worker, next_of_update), http_worker)

    def claim(
        self, task_type: str, count: int, http_worker: str, next_of_update: bool = False
    ) -> Claim:
        """``take``'s part in memory, registering the demand either way (a route on the event
        loop calls it, and hands ``hand`` to a thread only when it claimed or skipped some).

        ``next_of_update``: update-v2's take of the next task (``Demand.asked``). It keeps a
        larger count the same worker polled for: conductor-python's threads share one worker
        id, and each thread's update-v2 asking for 1 would announce room for 1 task where its
        batch poll had asked for many, starving the SDK's threads (ADR 24 a,
        bench/api_workers.py)."""
        now = time.monotonic()
        claim = Claim(now)
        with self._lock:
            before = self._room()
            self.demand.asked(task_type, http_worker, count, now, next_of_update)
            for task_id, held in list(self._waiting.items()):
                if len(claim.took) >= count:
                    break
                a = held.assignment
                if a.task_type != task_type:
                    continue
                del self._waiting[task_id]
                why = self._stale.why_not(a)
                if why is not None:
                    claim.skipped.append((a, why))
                    continue
                claim.took.append(a)
                self._taken[task_id] = a
            grew = self._room() > before or not claim.took
        if grew:
            self._kick.set()
        return claim

    def hand(self, claim: Claim, http_worker: str) -> list[wire.Assignment]:
        """``take``'s I/O: what ``claim`` skipped is given back, what it took is written to
        the store (put back to wait for the next poll if that fails) and reported started."""
        for a, why in claim.skipped:
            self.reporter.send(reports.not_started(a, self.worker_id, why))
        if not claim.took:
            return []
        try:
            self.store.handed(self.worker_id, http_worker, claim.took)
        except Exception:
            with self._lock:  # not handed: offer them to the next poll
                for a in claim.took:
                    self._taken.pop(a.task_id, None)
                    self._waiting[a.task_id] = _Held(a, claim.at)
            raise
        for a in claim.took:
            self.reporter.send(reports.started(a, self.worker_id))
        return claim.took

    def poll_due(self, task_type: str, domain: str, http_worker: str) -> bool:
        """Whether to write this poll's data (``GET /api/tasks/queue/polldata``): at most once a
        second per worker and type, as an idle SDK worker polls many times a second. In memory: a
        route hands only the write (``store.polled``) to a thread."""
        key, now = (task_type, domain, http_worker), time.monotonic()
        with self._lock:
            if now - self._poll_written.get(key, -POLL_DATA_EVERY_S) < POLL_DATA_EVERY_S:
                return False
            self._poll_written[key] = now
        return True

    def heard(self, task_type: str) -> None:
        """An HTTP worker updated a task of ``task_type`` through this process (ADR 34)."""
        with self._lock:
            self.demand.busy(task_type, time.monotonic())

    def forget(self, task_id: str) -> None:
        """An outcome of this task was reported (by this process): stop listing it."""
        with self._lock:
            self._taken.pop(task_id, None)

    def wake_on_arrival(self, task_type: str, waker: Callable[[], None], on: bool) -> None:
        """A long poll on ``task_type`` starts (``on``) or stops waiting: ``waker`` is called
        when a task of that type arrives; while it waits the type is not idle here."""
        with self._lock:
            self.demand.waiting(task_type, time.monotonic(), on)
            if on:
                self._wakers[waker] = task_type
            else:
                self._wakers.pop(waker, None)

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(30)
        self.store.close()
        if self._slot is not None:
            self._slot.close()

    # -- the loop -----------------------------------------------------------------------------
    def _room(self) -> int:
        """Tasks at once the status announces: those held, plus what the pollers of recently
        polled types asked for beyond the ones waiting for them; at least one."""
        held = len(self._taken) + max(len(self._waiting), self.demand.room())
        return max(1, min(self.capacity, held))

    def _run(self) -> None:
        kafka = self.settings.kafka
        prefix = kafka.topic_prefix
        reader = runner.AssignmentReader(
            connection(kafka),
            assignment_topic(prefix, self.pool),
            self.worker_id,
            f"{prefix}-worker-{self.worker_id}",
        )
        try:
            if not reader.open(self._stop):
                return
            self._restore()
            self._heartbeat()
            self.ready.set()
            log.info(
                "gateway worker %s started (%s[%d])", self.worker_id, reader.topic, reader.partition
            )
            next_beat = last_status = next_check = time.monotonic()
            next_beat += self.heartbeat_s
            while not self._stop.is_set():
                msg = reader.poll(0.05)
                if msg is not None:
                    self._on_record(msg)
                now = time.monotonic()
                if now >= next_check:
                    next_check = now + IDLE_CHECK_S
                    self._idle_check(now)
                kicked = self._kick.is_set() and now - last_status >= KICK_EVERY_S
                if now >= next_beat or kicked:
                    if now >= next_beat:
                        next_beat = now + self.heartbeat_s
                        self._settle(now)
                    self._kick.clear()
                    self._heartbeat()
                    last_status = now
                    reader.commit(self._commit_point(reader.position()))
                self.reporter.poll()
            # Leases are left to expire (the dispatcher's expiry does not count an attempt);
            # tasks HTTP workers hold can still be reported through another API process.
            self.reporter.tombstone(self.worker_id)
        except Exception:
            log.exception("gateway worker %s failed", self.worker_id)
            raise
        finally:
            reader.close()
            if self.reporter.flush(30) > 0:
                log.error("gateway worker %s: some reports were not delivered", self.worker_id)

    def _restore(self) -> None:
        """After a restart: the tasks HTTP workers took from this gateway and have not ended
        (the store has them) are listed again, so their leases live on; their assignments,
        read again, are known. Assignments no poll took were not committed past: read again."""
        try:
            rows = self.store.taken_by(self.worker_id)
        except Exception as exc:  # noqa: BLE001  (their leases expire; the decider fences)
            log.warning("gateway store unavailable, taken tasks not restored: %s", exc)
            return
        with self._lock:
            for lease in rows:
                self._taken[lease.task_id] = as_assignment(lease)
        if rows:
            log.info("gateway worker %s: %d task(s) HTTP workers hold", self.worker_id, len(rows))

    def _commit_point(self, position: int) -> int:
        """The first assignment no poll took yet, or the position read up to."""
        with self._lock:
            waiting = [h.offset for h in self._waiting.values() if h.offset >= 0]
        return min([*waiting, position])

    def _settle(self, now: float) -> None:
        """Each heartbeat: drop tasks some API process reported ended, then the idle check."""
        with self._lock:
            taken = list(self._taken)
        try:
            ended = self.store.ended_of(self.worker_id, taken)
        except Exception as exc:  # noqa: BLE001  (the database is down: keep listing them)
            log.warning("gateway store unavailable: %s", exc)
            ended = set()
        with self._lock:
            for task_id in ended:
                self._taken.pop(task_id, None)
        self._idle_check(now)

    def _idle_check(self, now: float) -> None:
        """Forget the demand of types idle here (a status goes out at once if any was), and
        hand back the tasks of idle types that no poll took within the type's patience."""
        back: list[tuple[wire.Assignment, float]] = []
        with self._lock:
            if self.demand.expire(now):
                self._kick.set()
            for task_id, held in list(self._waiting.items()):
                task_type = held.assignment.task_type
                patience = self.demand.patience(task_type)
                if self.demand.idle(task_type, now) and now - held.since >= patience:
                    del self._waiting[task_id]
                    back.append((held.assignment, patience))
        for a, patience in back:
            log.info("handing back %s (%s): not polled for %.2fs", a.task_id, a.task_type, patience)
            reason = NOT_POLLED.format(s=patience)
            self.reporter.send(reports.declined(a, self.worker_id, reason))

    def _heartbeat(self) -> None:
        with self._lock:
            held = [h.assignment for h in self._waiting.values()] + list(self._taken.values())
            types = sorted(self.demand.types())
            room = self._room()
        status = wire.WorkerStatus(
            worker_id=self.worker_id,
            pool=self.pool,
            version="gateway",
            types=types,
            cpu=UNBOUNDED_CPU,
            memory_mb=UNBOUNDED_MEMORY_MB,
            labels={"gateway": "http"},
            running=sorted({a.task_id for a in held}),
            concurrency=room,
            used=use_of(held).report(),
            sent_at=reports.now_iso(),
            deployment=self.settings.system.deployment_id,
            lease_key=self.lease_key.public,
        )
        self.reporter.status(status, self.worker_id)
        self._stale.beat()

    def _on_record(self, msg: Message) -> None:
        if msg.value() is None:
            return
        try:
            record = wire.decode(msg.value())
        except SchemaError as exc:
            self.reporter.dead_letter(msg, str(exc), type(exc).__name__)
            return
        if getattr(record, "worker_id", None) != self.worker_id:
            return
        if isinstance(record, wire.Assignment):
            opened = runner.unseal(record, self.lease_key, msg, self.reporter)
            if opened is None:
                return
            record = opened
        ours = self.settings.system.deployment_id
        match record:
            case wire.Assignment() if not same_deployment(record.deployment, ours):
                reason = (  # ADR 63: never handed to an HTTP worker
                    f"deployment mismatch: assignment of {record.task_id} from deployment "
                    f"{record.deployment!r}, this gateway belongs to {ours!r}"
                )
                log.error("%s: not run", reason)
                self.reporter.dead_letter(msg, reason, "DeploymentMismatch")
            case wire.Assignment():
                with self._lock:
                    known = record.task_id in self._taken or record.task_id in self._waiting
                    if not known:
                        offset = msg.offset() or 0
                        self._waiting[record.task_id] = _Held(record, time.monotonic(), offset)
                    wakers = [w for w, t in self._wakers.items() if t == record.task_type]
                for wake in wakers:
                    wake()
            case wire.Cancel():
                self._cancel(record)
            case _:
                log.warning("ignoring a %s record on the assignments topic", record.kind)

    def _cancel(self, cancel: wire.Cancel) -> None:
        """The dispatcher ended a lease: a waiting task is dropped (reported cancelled, as the
        SDK does), a taken one is marked over so its late update is refused at once."""
        self._stale.cancelled(cancel.task_id, cancel.lease_epoch)
        with self._lock:
            held = self._waiting.get(cancel.task_id)
            if held is not None and held.assignment.lease_epoch <= cancel.lease_epoch:
                del self._waiting[cancel.task_id]
            else:
                held = None
            taken = self._taken.get(cancel.task_id)
            if taken is not None and taken.lease_epoch <= cancel.lease_epoch:
                del self._taken[cancel.task_id]
            else:
                taken = None
        if held is not None:
            reason = f"cancelled before an HTTP worker took it: {cancel.reason}"
            self.reporter.send(reports.cancelled(held.assignment, self.worker_id, reason))
        if taken is not None:
            try:
                self.store.lease_over(cancel.task_id, cancel.lease_epoch, cancel.reason)
            except Exception as exc:  # noqa: BLE001  (the decider fences the update anyway)
                log.warning("gateway store unavailable: %s", exc)
