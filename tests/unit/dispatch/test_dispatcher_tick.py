"""The dispatcher's tick without a broker: the order of its deliveries, which keeps every lease
known to the decider before its worker can answer and never hands one epoch to two workers
(ADR 14, ADR 50); the time each record is stamped with; and ready offsets committed at most
every ``commit_every_ms``, always after a delivery (ADR 31)."""

from __future__ import annotations

from datetime import datetime, timedelta

from tests.unit.dispatch.fakes import T0, OnFakes, on_fakes, ready, worker


def queue(f: OnFakes, task_id: str, offset: int | None = None) -> None:
    """``task_id`` read from ready partition 2 (at ``offset``: its commit point waits for it)."""
    d, t = f.d, ready(task_id)
    d.journal.track(t, 2)
    if offset is not None:
        d.ready.offsets.read((d.topics.ready, 2), offset)
        d.ready.offsets.queued((d.topics.ready, 2), task_id, offset)
    d.core.enqueue(t)


def test_a_tick_delivers_the_epoch_with_the_dispatch_then_assignment_lease_and_commit() -> None:
    f = on_fakes()
    queue(f, "t", 7)
    f.d.step(0)
    assert f.out.log == [
        ("produce", "p.leases", "t"),  # epoch 1 taken
        ("produce", "p.task-results", "wf-t"),  # DispatchTask, in the same delivery
        ("delivered",),
        ("produce", "p.assignments", "w1"),
        ("produce", "p.leases", "t"),  # the lease
        ("delivered",),
        ("commit",),
    ]
    assert [(tp.partition, tp.offset) for tp in f.ready.commits[0]] == [(2, 8)]


def test_an_assignment_is_stamped_when_it_leaves_after_its_dispatch_was_delivered() -> None:
    """The DispatchTask carries the decision's time; the assignment and its lease, which wait
    for that delivery, the time they leave: a worker reads the assignment's age to trust the
    end its last fetch brought (``runner.FETCHED_END_FRESH_S``)."""
    readings = [T0]

    def clock() -> datetime:  # a millisecond later at every reading
        readings.append(readings[-1] + timedelta(milliseconds=1))
        return readings[-1]

    f = on_fakes(clock=clock)
    queue(f, "t")
    f.out.stamps.clear()
    f.d.step(0)
    stamps = dict(f.out.stamps[:2])  # the grant and its DispatchTask: one delivery
    assert stamps["p.leases"] == stamps["p.task-results"]
    decided = stamps["p.task-results"]
    assert f.out.stamps[2:4] == [
        ("p.assignments", decided + timedelta(milliseconds=1)),
        ("p.leases", decided + timedelta(milliseconds=1)),
    ]


def test_a_take_back_is_delivered_before_the_next_grant_of_its_task() -> None:
    """A lease expires and the task is granted again in the same tick: the take-back's journal
    record and ExpireLease land first, so a crash cannot leave a later DispatchTask at the
    decider while the journal still shows the old lease live (ADR 50)."""
    now = [T0]
    f = on_fakes(clock=lambda: now[0])
    d = f.d
    queue(f, "t")
    d.step(0)
    assert d.core.leases.leases["t"].epoch == 1
    now[0] = d.core.leases.leases["t"].expires_at + timedelta(seconds=1)
    d.core.fleet.upsert(worker("w1", now[0]))
    f.out.log.clear()
    d.step(0)
    assert d.core.leases.leases["t"].epoch == 2
    assert f.out.log[:8] == [
        ("produce", "p.assignments", "w1"),  # the Cancel of epoch 1
        ("produce", "p.task-results", "wf-t"),  # its ExpireLease
        ("produce", "p.leases", "t"),  # back in its queue, epoch 1 taken back
        ("delivered",),
        ("produce", "p.leases", "t"),  # epoch 2 taken
        ("produce", "p.task-results", "wf-t"),  # its DispatchTask
        ("delivered",),
        ("produce", "p.assignments", "w1"),
    ]


def test_ready_offsets_are_committed_at_most_every_commit_interval() -> None:
    """The first tick commits; a tick within ``commit_every_ms`` leaves its last records to the
    producer (no flush, no commit); revoke and stop commit whatever the interval."""
    f = on_fakes(commit_every_ms=60_000)
    d, out = f.d, f.out
    queue(f, "a", 7)
    d.step(0)
    assert out.log[-2:] == [("delivered",), ("commit",)]
    out.log.clear()
    queue(f, "b", 8)
    d.step(0)
    assert ("produce", "p.assignments", "w1") in out.log
    assert out.log[-1] == ("produce", "p.leases", "b")  # the lease, not waited for
    assert ("commit",) not in out.log
    d._on_revoke(None, [])  # type: ignore[arg-type]
    assert out.log[-2:] == [("delivered",), ("commit",)]


def test_a_zero_interval_commits_every_tick() -> None:
    f = on_fakes(commit_every_ms=0)
    for n, task_id in enumerate(("a", "b")):
        queue(f, task_id, 7 + n)
        f.d.step(0)
        assert f.out.log[-2:] == [("delivered",), ("commit",)]
