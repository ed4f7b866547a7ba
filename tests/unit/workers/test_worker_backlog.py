"""The worker's backlog of assignments read but not started: ``has`` answers from an index kept
with the deque through add, pop, drop and drain (a resent assignment is not queued twice)."""

from __future__ import annotations

from es_sched.serialization import wire
from es_sched.workers.runner import Backlog


def assignment(task_id: str, epoch: int) -> wire.Assignment:
    return wire.Assignment(
        "w", "wf", task_id, "t", 1, epoch, "tok", "2026-01-01T00:00:00+00:00", {}
    )


def test_has_follows_add_pop_drop_and_drain() -> None:
    b = Backlog()
    b.add(assignment("a", 1), 10)
    b.add(assignment("a", 1), 11)  # the same assignment read twice (a re-delivery)
    b.add(assignment("b", 1), 12)
    b.add(assignment("b", 2), 13)
    assert b.has("a", 1) and b.has("b", 2) and not b.has("a", 2)
    assert b.pop().task_id == "a"
    assert b.has("a", 1)  # one copy still waits
    assert b.pop().task_id == "a"
    assert not b.has("a", 1)
    assert [a.lease_epoch for a in b.drop("b", 1)] == [1]
    assert not b.has("b", 1) and b.has("b", 2)
    assert b.commit_point() == 13
    assert [a.task_id for a in b.drain()] == ["b"]
    assert not b.has("b", 2) and len(b) == 0
