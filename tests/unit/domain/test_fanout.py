"""Large fan-out (issue 13 item 3): a dynamic fork's decisions cost O(branches touched).

The index (``domain.fanout``) must decide exactly what the full walk decides: every scenario
here runs twice, indexed and with ``engine.FULL_WALK``, and the histories must be equal. The
cost test counts the walk's work per input (calls, not time) at two fork sizes.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from es_sched.domain import engine
from es_sched.domain.fanout import rebuild
from es_sched.domain.layered import Layered, layered
from es_sched.domain.state import WorkflowState
from es_sched.kafka.topics import Topics
from es_sched.runtime.outbox import snapshot
from es_sched.serialization.changelog import Changelog
from testkit.core import rerun_with_python_core
from tests.unit.domain.harness import Driver, workflow

FORK = {
    "name": "fork",
    "taskReferenceName": "fork",
    "type": "FORK_JOIN_DYNAMIC",
    "inputParameters": {"tasks": "${workflow.input.tasks}", "inputs": "${workflow.input.inputs}"},
    "dynamicForkTasksParam": "tasks",
    "dynamicForkTasksInputParamName": "inputs",
}


def fan_out(n: int, join: dict[str, Any] | None = None, **branch: Any) -> Driver:
    definition = workflow(
        FORK,
        join or {"name": "join", "taskReferenceName": "join", "type": "JOIN"},
        {"name": "after", "taskReferenceName": "after", "type": "SIMPLE"},
    )
    tasks = [{"name": "work", "taskReferenceName": f"b{i}", **branch} for i in range(n)]
    inputs = {f"b{i}": {"i": i} for i in range(n)}
    taskdefs = [{"name": "work", "retryCount": 1, "retryDelaySeconds": 0}]
    return Driver(definition, {"tasks": tasks, "inputs": inputs}, taskdefs)


def scenario(seed: int, n: int = 24, **kwargs: Any) -> Driver:
    """Branches finish in a random order; some fail once (retried), some fail for good."""
    rng = random.Random(seed)  # noqa: S311 - a reproducible test order
    drv = fan_out(n, **kwargs)
    order = list(range(n))
    rng.shuffle(order)
    for i in order:
        if drv.st.terminal or drv.st.ending:
            break
        roll = rng.random()
        if roll < 0.15:
            drv.report(f"b{i}", "FAILED", reason="flaky")  # retried once (retryCount 1)
        elif roll < 0.18:
            drv.report(f"b{i}", "TERMINAL", reason="broken")
        if not drv.st.terminal and not drv.latest(f"b{i}").terminal:
            drv.report(f"b{i}")
        if not engine.FULL_WALK:
            assert_index_is_derived(drv.st)
    if drv.st.instance("after") is not None and not drv.st.terminal:
        drv.report("after")
    return drv


def restored(st: WorkflowState) -> WorkflowState:
    """``st`` written as the decider writes it and read back as a restore reads it."""
    records, _ = snapshot(Topics("t", 1), st, 0, set())
    changelog = Changelog()
    for record in records:
        changelog.feed(record.key, record.value)
    [state] = changelog.states()
    return state


def assert_index_is_derived(st: WorkflowState) -> None:
    """What evolve kept equals what a restore rebuilds, and what a snapshot restores."""
    assert restored(st).fans == st.fans
    copy = st.clone()
    assert rebuild(copy).fans == st.fans


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"optional": True},
        {"join": {"name": "join", "taskReferenceName": "join", "type": "JOIN", "joinOn": ["b0"]}},
    ],
    ids=["plain", "optional", "join-on-some"],
)
def test_indexed_walk_decides_what_the_full_walk_decides(
    seed: int, kwargs: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    indexed = scenario(seed, **kwargs)
    assert indexed.st.fans, "the fork was indexed"
    monkeypatch.setattr(engine, "FULL_WALK", True)
    full = scenario(seed, **kwargs)
    assert indexed.events == full.events
    assert indexed.st.status == full.st.status


def test_only_a_fork_of_tasks_the_walk_does_not_descend_into_is_indexed() -> None:
    drv = fan_out(3, type="INLINE", inputParameters={"expression": "1", "evaluatorType": "js"})
    assert drv.st.fans  # INLINE: a plain task, indexed
    drv = fan_out(3, type="SWITCH", evaluatorType="value-param", expression="x")
    assert not drv.st.fans  # the walk descends into a SWITCH: not indexed


class Counting:
    """Counts the walk's visits: every task list walked and every instance looked up."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.visits = 0
        walk_list, instance = engine.Walker.walk_list, WorkflowState.instance

        def counted_walk(walker: engine.Walker, *args: Any, **kw: Any) -> engine.Outcome:
            self.visits += 1
            return walk_list(walker, *args, **kw)

        def counted_instance(st: WorkflowState, ref: str) -> Any:
            self.visits += 1
            return instance(st, ref)

        monkeypatch.setattr(engine.Walker, "walk_list", counted_walk)
        monkeypatch.setattr(WorkflowState, "instance", counted_instance)


def work_per_input(n: int, monkeypatch: pytest.MonkeyPatch) -> tuple[float, list[int]]:
    """(visits per branch while the fork is scheduled, visits of each branch completion)."""
    counter = Counting(monkeypatch)
    drv = fan_out(n)
    per_branch = counter.visits / n
    per_completion = []
    for i in (0, n // 2, n - 2):  # a few branches, anywhere in the fork, not the last one
        counter.visits = 0
        drv.report(f"b{i}")
        per_completion.append(counter.visits)
    return per_branch, per_completion


def test_a_decision_costs_the_branches_it_touches_not_all_of_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Counting replaces the walk's methods, which a compiled core's callers never look up.
    if rerun_with_python_core(
        f"{__file__}::test_a_decision_costs_the_branches_it_touches_not_all_of_them"
    ):
        return
    small_branch, small = work_per_input(100, monkeypatch)
    large_branch, large = work_per_input(2_000, monkeypatch)
    assert large == small, f"visits per completion grow with the fork: {small} -> {large}"
    assert large_branch <= small_branch + 1, (
        f"visits per scheduled branch grow with the fork: {small_branch} -> {large_branch}"
    )


def test_a_state_copy_shares_its_task_map() -> None:
    drv = fan_out(2_000)
    drv.report("b7")  # a state a decision made (a restored or started one is a plain dict)
    copy = drv.st.clone()
    assert isinstance(copy.tasks, Layered) and isinstance(drv.st.tasks, Layered)
    assert copy.tasks._base is drv.st.tasks._base  # shared, not copied
    assert len(copy.tasks._top) <= 32 + 45  # MIN_TOP + isqrt(2000): bounded changes only


@pytest.mark.parametrize("seed", range(20))
def test_layered_behaves_as_a_dict(seed: int) -> None:
    rng = random.Random(seed)  # noqa: S311 - a reproducible test order
    plain: dict[int, int] = {}
    lay: Layered[int, int] = Layered()
    snapshots: list[tuple[dict[int, int], Layered[int, int]]] = []
    for step in range(600):
        key = rng.randrange(200)
        plain[key] = step
        lay[key] = step
        if rng.random() < 0.1:
            snapshots.append((dict(plain), lay))
            lay = layered(lay)  # the old one must not see later writes
        assert len(lay) == len(plain) and lay.get(key) == step and key in lay
    assert list(lay) == list(plain) and list(lay.values()) == list(plain.values())
    assert list(lay.items()) == list(plain.items()) and lay == plain
    for frozen, old in snapshots:
        assert list(old.items()) == list(frozen.items())
