"""The lease journal (ADR 14) without a broker: what it writes, and how a fresh core is rebuilt
from what it wrote (``DispatchCore.resume``), then behaves as the core that wrote it would:
heartbeats keep the lease, silence ends it after k x h, epochs go on from the last one granted,
the attempt stays. The order the tick writes in: ``test_dispatcher_tick.py``."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from es_sched.dispatch import journal as journal_module
from es_sched.dispatch.core.engine import Assignment, DispatchCore
from es_sched.dispatch.core.leases import LeaseTable
from es_sched.dispatch.core.placement import Fleet, WorkerView
from es_sched.dispatch.journal import LeaseJournal
from tests.unit.dispatch.fakes import T0, FakeOutput, Msg, ready, worker

TOPIC = "p.leases"


def new_core(*workers: WorkerView) -> DispatchCore:
    """Leases of 3 x 1 s heartbeats; a worker silent for 2 s gets no new work."""
    core = DispatchCore(leases=LeaseTable(heartbeat_s=1, k=3), fleet=Fleet(suspect_after_s=2))
    for w in workers:
        core.fleet.upsert(w)
    return core


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
