"""How partition groups' verifications merge (ADR 43): figures add up, statuses count, each
target's mismatches stay together and in the order of the targets asked for."""

from __future__ import annotations

from es_sched.projections.replay import Mismatch
from es_sched.projections.verified import Verified


def _m(source: str, wf: str) -> Mismatch:
    return Mismatch(source, "workflow", wf, "status", "COMPLETED", "FAILED")


def test_groups_merge_by_target_in_the_order_asked_for() -> None:
    out = Verified(found={"pg": [], "search": [], "changelog": []})
    first = {"pg": [_m("pg", "a")], "search": [], "changelog": [_m("changelog", "a")]}
    second = {"pg": [], "search": [_m("search", "b")], "changelog": []}
    out.add(
        Verified(
            events=10, refusals=1, workflows=2, compared=2, statuses={"COMPLETED": 2}, found=first
        )
    )
    out.add(Verified(events=5, workflows=1, compared=1, statuses={"COMPLETED": 1}, found=second))
    assert (out.events, out.refusals, out.workflows, out.compared) == (15, 1, 3, 3)
    assert out.statuses == {"COMPLETED": 3}
    assert [(m.source, m.id) for m in out.mismatches()] == [
        ("pg", "a"),
        ("search", "b"),
        ("changelog", "a"),
    ]


def test_statuses_of_different_groups_are_kept_apart() -> None:
    out = Verified()
    out.add(Verified(statuses={"COMPLETED": 1, "FAILED": 2}))
    out.add(Verified(statuses={"RUNNING": 1, "FAILED": 1}))
    assert out.statuses == {"COMPLETED": 1, "FAILED": 3, "RUNNING": 1}
