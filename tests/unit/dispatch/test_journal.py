"""The lease journal (ADR 14) without a broker: what the dispatcher writes and in which order,
and how a fresh core is rebuilt from what it wrote (``DispatchCore.resume``), then behaves as
the core that wrote it would: heartbeats keep the lease, silence ends it after k x h, epochs go
on from the last one granted, the attempt stays."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from confluent_kafka import TopicPartition

from es_sched.dispatch import journal as journal_module
from es_sched.dispatch import records as dispatch_records
from es_sched.dispatch.core.engine import Assignment, DispatchCore
from es_sched.dispatch.core.leases import LeaseTable
from es_sched.dispatch.core.placement import Fleet, WorkerView
from es_sched.dispatch.core.queues import ReadyTask
from es_sched.dispatch.dispatcher import Dispatcher
from es_sched.dispatch.journal import LeaseJournal
from es_sched.serialization.records import encode_ready
from tests.support.settings import private_vars, settings_with

T0 = datetime(2026, 5, 1, 9, 0, tzinfo=UTC)
TOPIC = "p.leases"


def ready(task_id: str, cpu: float = 2, **kw: Any) -> ReadyTask:
    """A task as the dispatcher reads it from a ready record."""
    raw = encode_ready(
        workflow_id=f"wf-{task_id}",
        task_id=task_id,
        ref="step",
        name="encode",
        attempt=kw.pop("attempt", 1),
        input={"n": 1},
        priority=kw.pop("priority", 4),
        resources={"cpu": cpu},
        rate_limit_key=None,
        tenant=None,
        callback=False,
        workflow_started_at=T0,
    )
    return dispatch_records.ready_task(raw, T0, T0)


def worker(wid: str, seen: datetime, cpu: float = 4) -> WorkerView:
    return WorkerView(wid, "default", "1.0", frozenset({"encode"}), cpu, 8000, last_seen=seen)


def new_core(*workers: WorkerView) -> DispatchCore:
    """Leases of 3 x 1 s heartbeats; a worker silent for 2 s gets no new work."""
    core = DispatchCore(leases=LeaseTable(heartbeat_s=1, k=3), fleet=Fleet(suspect_after_s=2))
    for w in workers:
        core.fleet.upsert(w)
    return core


@dataclass
class Msg:
    """A journal record as ``read_partition`` yields it."""

    k: str
    v: bytes | None

    def key(self) -> bytes:
        return self.k.encode()

    def value(self) -> bytes | None:
        return self.v


@dataclass
class FakeOutput:
    """Records what the dispatcher produces and when it waits for delivery."""

    log: list[tuple[str, ...]] = field(default_factory=list)
    journal: list[Msg] = field(default_factory=list)
    dead_letters: list[Any] = field(default_factory=list)
    stamps: list[tuple[str, datetime]] = field(default_factory=list)  # topic, record time

    def produce(
        self, topic: str, key: str, value: bytes | None, now: datetime, partition: int = -1
    ) -> None:
        self.log.append(("produce", topic, key))
        self.stamps.append((topic, now))
        if topic == TOPIC or topic.endswith(".leases"):
            self.journal.append(Msg(key, value))

    def delivered_all(self) -> bool:
        self.log.append(("delivered",))
        return True

    def dead(self, msg: Any, exc: Exception) -> None:
        self.dead_letters.append((msg, exc))


def journal_over(out: FakeOutput, monkeypatch: pytest.MonkeyPatch) -> LeaseJournal:
    """A journal whose partition 0 is what ``out`` received."""
    monkeypatch.setattr(journal_module, "read_partition", lambda *_: list(out.journal))
    return LeaseJournal("unused:9092", TOPIC, out)  # type: ignore[arg-type]


def rebuild(journal: LeaseJournal, core: DispatchCore, now: datetime) -> None:
    for entry in journal.load(0):
        journal.resumed(entry, 0)
        core.resume(entry, now)


def test_a_core_rebuilt_from_the_journal_keeps_the_lease_the_queue_and_the_epochs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    out = FakeOutput()
    journal = journal_over(out, monkeypatch)
    old = new_core(worker("w1", T0, cpu=8))
    for t in (ready("leased"), ready("taken"), ready("ended")):
        journal.track(t, 0)
        old.enqueue(t)
    decisions = old.dispatch(T0, iter(["tok-a", "tok-b", "tok-c"]).__next__)
    for a in decisions:
        assert isinstance(a, Assignment)
        journal.granting(a.task, a.lease.epoch, T0)
        journal.leased(a.task, a.lease, a.placement.gpu, T0)
    # "taken" lost its lease (its epoch 1 was granted), "ended" ended: a tombstone.
    journal.queued("taken", 1, T0 + timedelta(seconds=2))
    journal.ended("ended", T0 + timedelta(seconds=2))
    assert out.journal[-1] == Msg("ended", None)

    later = T0 + timedelta(seconds=30)  # the restart: w1 reported just now
    core = new_core(worker("w1", later))
    fresh = LeaseJournal("unused:9092", TOPIC, FakeOutput())  # type: ignore[arg-type]
    monkeypatch.setattr(journal_module, "read_partition", lambda *_: list(out.journal))
    rebuild(fresh, core, later)

    lease = core.leases.leases["leased"]
    assert (lease.worker_id, lease.epoch, lease.token, lease.attempt) == ("w1", 1, "tok-a", 1)
    assert lease.started_at == T0 and lease.expires_at == later + timedelta(seconds=3)
    assert set(core.in_flight) == {"leased"} and "ended" not in fresh
    assert core.fleet.workers["w1"].reserved_cpu == 2  # its resources are held again
    assert core.limits.in_flight["encode"] == 1
    assert core.queues.by_type["encode"].peek(later) is not None  # "taken" waits again
    # The worker's heartbeat keeps the lease; "taken" goes out at its next epoch, same attempt.
    beat = later + timedelta(seconds=2)
    core.fleet.workers["w1"].last_seen = beat
    core.leases.heartbeat("w1", beat)
    assert core.expire(later + timedelta(seconds=3)) == []
    [again] = core.dispatch(later + timedelta(seconds=3), lambda: "tok-d")
    assert isinstance(again, Assignment)
    assert (again.task.task_id, again.lease.epoch, again.task.attempt) == ("taken", 2, 1)
    # Silence: k x h after the last heartbeat the rebuilt lease ends and its task is queued.
    [gone] = core.expire(later + timedelta(seconds=5))
    assert gone.task_id == "leased" and core.fleet.workers["w1"].reserved_cpu == 2  # "taken"
    core.fleet.upsert(worker("w2", later + timedelta(seconds=5)))
    [moved] = core.dispatch(later + timedelta(seconds=5), lambda: "tok-e")
    assert isinstance(moved, Assignment)
    assert (moved.placement.worker_id, moved.lease.epoch, moved.task.attempt) == ("w2", 2, 1)


def test_a_granted_epoch_whose_lease_was_not_recorded_is_never_granted_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The process died between the grant's journal record and its lease record: the task
    waits again, and its next grant takes the next epoch (the decider saw epoch 1 maybe)."""
    out = FakeOutput()
    journal = journal_over(out, monkeypatch)
    t = ready("t")
    journal.track(t, 0)
    journal.granting(t, 1, T0)
    core = new_core(worker("w1", T0))
    rebuild(LeaseJournal("unused:9092", TOPIC, FakeOutput()), core, T0)  # type: ignore[arg-type]
    assert core.in_flight == {}
    [a] = core.dispatch(T0, lambda: "tok")
    assert isinstance(a, Assignment) and a.lease.epoch == 2


def test_a_record_that_does_not_decode_is_dead_lettered_and_not_resumed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    out = FakeOutput(journal=[Msg("bad", b"{not json")])
    sink = FakeOutput()
    monkeypatch.setattr(journal_module, "read_partition", lambda *_: list(out.journal))
    assert LeaseJournal("unused:9092", TOPIC, sink).load(0) == []  # type: ignore[arg-type]
    assert len(sink.dead_letters) == 1


def test_revoked_tasks_are_forgotten_without_a_hand_back(monkeypatch: pytest.MonkeyPatch) -> None:
    out = FakeOutput()
    journal = journal_over(out, monkeypatch)
    core = new_core(worker("w1", T0))
    for t, p in ((ready("mine"), 0), (ready("theirs"), 1), (ready("queued-theirs"), 1)):
        journal.track(t, p)
        core.enqueue(t)
    core.dispatch(T0, iter(["a", "b"]).__next__)
    written = len(out.log)
    gone = journal.forget({1})
    core.drop(gone)
    assert gone == {"theirs", "queued-theirs"}
    assert set(core.leases.leases) | set(core.in_flight) <= {"mine"}
    assert core.queues.types() == [] and len(out.log) == written  # nothing written
    assert core.fleet.workers["w1"].reserved_cpu == 2


def test_a_tick_delivers_the_epoch_with_the_dispatch_then_assignment_lease_and_commit() -> None:
    """The order that keeps every lease known to the decider before its worker can answer and
    never hands one epoch to two workers (ADR 14, ADR 50)."""
    out, commits = FakeOutput(), list[list[TopicPartition]]()
    d = ticking(out, commits, lambda: T0)
    t = ready("t")
    d.journal.track(t, 2)
    d.offsets.read((d.topics.ready, 2), 7)
    d.offsets.queued((d.topics.ready, 2), "t", 7)
    d.core.enqueue(t)
    d.step(0)
    assert out.log == [
        ("produce", "p.leases", "t"),  # epoch 1 taken
        ("produce", "p.task-results", "wf-t"),  # DispatchTask, in the same delivery
        ("delivered",),
        ("produce", "p.assignments", "w1"),
        ("produce", "p.leases", "t"),  # the lease
        ("delivered",),
        ("commit",),
    ]
    assert [(tp.partition, tp.offset) for tp in commits[0]] == [(2, 8)]


def test_an_assignment_is_stamped_when_it_leaves_after_its_dispatch_was_delivered() -> None:
    """The DispatchTask carries the decision's time; the assignment and its lease, which wait
    for that delivery, the time they leave: a worker reads the assignment's age to trust the
    end its last fetch brought (``runner.FETCHED_END_FRESH_S``)."""
    out, commits, readings = FakeOutput(), list[list[TopicPartition]](), [T0]

    def clock() -> datetime:  # a millisecond later at every reading
        readings.append(readings[-1] + timedelta(milliseconds=1))
        return readings[-1]

    d = ticking(out, commits, clock)
    t = ready("t")
    d.journal.track(t, 2)
    d.core.enqueue(t)
    out.stamps.clear()
    d.step(0)
    stamps = dict(out.stamps[:2])  # the grant and its DispatchTask: one delivery
    assert stamps["p.leases"] == stamps["p.task-results"]
    decided = stamps["p.task-results"]
    assert out.stamps[2:4] == [
        ("p.assignments", decided + timedelta(milliseconds=1)),
        ("p.leases", decided + timedelta(milliseconds=1)),
    ]


def test_a_take_back_is_delivered_before_the_next_grant_of_its_task() -> None:
    """A lease expires and the task is granted again in the same tick: the take-back's journal
    record and ExpireLease land first, so a crash cannot leave a later DispatchTask at the
    decider while the journal still shows the old lease live (ADR 50)."""
    out, commits, now = FakeOutput(), list[list[TopicPartition]](), [T0]
    d = ticking(out, commits, lambda: now[0])
    t = ready("t")
    d.journal.track(t, 2)
    d.core.enqueue(t)
    d.step(0)
    assert d.core.leases.leases["t"].epoch == 1
    now[0] = d.core.leases.leases["t"].expires_at + timedelta(seconds=1)
    d.core.fleet.upsert(worker("w1", now[0]))
    out.log.clear()
    d.step(0)
    assert d.core.leases.leases["t"].epoch == 2
    assert out.log[:8] == [
        ("produce", "p.assignments", "w1"),  # the Cancel of epoch 1
        ("produce", "p.task-results", "wf-t"),  # its ExpireLease
        ("produce", "p.leases", "t"),  # back in its queue, epoch 1 taken back
        ("delivered",),
        ("produce", "p.leases", "t"),  # epoch 2 taken
        ("produce", "p.task-results", "wf-t"),  # its DispatchTask
        ("delivered",),
        ("produce", "p.assignments", "w1"),
    ]


def ticking(out: FakeOutput, commits: list[list[TopicPartition]], clock: Any) -> Dispatcher:
    """A dispatcher whose tick writes to ``out``, with worker w1 (4 CPUs) in its fleet."""
    settings = settings_with(private_vars("p"))
    d = Dispatcher(settings, clock=clock, token=lambda: "tok")
    d.output = out  # type: ignore[assignment]
    d.journal = LeaseJournal("unused:9092", d.topics.leases, out)  # type: ignore[arg-type]
    d.read_inputs = lambda wait_s: None  # type: ignore[method-assign]

    class Ready:
        def commit(self, offsets: list[TopicPartition], asynchronous: bool) -> None:
            out.log.append(("commit",))
            commits.append(offsets)

        def assignment(self) -> list[TopicPartition]:  # for the lag gauge
            return []

        def position(self, parts: list[TopicPartition]) -> list[TopicPartition]:
            return parts

    d.ready = Ready()  # type: ignore[assignment]
    d.core.fleet.upsert(worker("w1", clock()))
    return d
