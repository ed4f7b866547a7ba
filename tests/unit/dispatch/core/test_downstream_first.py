"""Downstream-first across task types (ADR 69), on the pure core with a simulated clock.

The flood: a workflow is one ``ingest`` task, then two ``encode`` tasks in parallel (its last
step), each task 1 s, all on one pool of 4 slots; a new workflow arrives every 0.5 s, more
work than the pool does (3 task-seconds per workflow, 6 a second asked of 4). With the rule
on, a started workflow's encodes go before new ingests, so a workflow once started finishes
within a bounded time however long the flood lasts; off, the types take turns, half the
starts go to new ingests, and the encodes of workflows already running pile up behind them.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest

from es_sched.dispatch.core.engine import Assignment, DispatchCore
from es_sched.dispatch.core.placement import WorkerView
from es_sched.dispatch.core.queues import ReadyTask
from es_sched.domain.definitions import parse_workflow, steps_to_end

pytestmark = pytest.mark.unit
T0 = datetime(2026, 5, 1, 9, 0, tzinfo=UTC)
TICK = 0.25  # the simulated dispatcher's tick


@dataclass
class Flood:
    """Arrivals, dispatch and completions in simulated time; per workflow, when its first
    task started and when its last ended."""

    core: DispatchCore
    began: dict[str, float] = field(default_factory=dict)
    left: dict[str, int] = field(default_factory=dict)
    done: dict[str, float] = field(default_factory=dict)
    ends: list[tuple[float, str]] = field(default_factory=list)  # (end time, task id)
    running: dict[str, ReadyTask] = field(default_factory=dict)
    now: float = 0.0  # simulated seconds since the flood began

    def run(self, seconds: float, every: float = 0.5) -> None:
        ids = itertools.count()
        next_arrival, t = 0.0, 0.0
        while t < seconds:
            now = T0 + timedelta(seconds=t)
            for w in self.core.fleet.workers.values():
                w.last_seen = now
            for end, tid in [e for e in self.ends if e[0] <= t]:
                self.ends.remove((end, tid))
                self._ended(self.running.pop(tid), t)
            while next_arrival <= t:
                n = next(ids)
                wf = f"wf{n}"
                self.left[wf] = 3
                self._queue(ReadyTask(f"{wf}-ingest", wf, "ingest", 4, now, now, steps_to_end=1))
                next_arrival += every
            for d in self.core.dispatch(now, lambda: "tok"):
                assert isinstance(d, Assignment)
                self.began.setdefault(d.task.workflow_id, t)
                self.running[d.task.task_id] = d.task
                self.ends.append((t + 1.0, d.task.task_id))
            t += TICK
        self.now = t

    def _queue(self, task: ReadyTask) -> None:
        self.core.enqueue(task)

    def _ended(self, task: ReadyTask, t: float) -> None:
        self.core.finished(task.task_id)
        wf = task.workflow_id
        self.left[wf] -= 1
        if task.task_type == "ingest":
            now = T0 + timedelta(seconds=t)
            started = task.workflow_started_at
            for i in range(2):
                enc = ReadyTask(f"{wf}-encode{i}", wf, "encode", 4, now, started, steps_to_end=0)
                self._queue(enc)
        if self.left[wf] == 0:
            self.done[wf] = t

    def worst_after_start(self, since: float) -> float:
        """The longest time from first start to end of the workflows started after ``since``;
        one still running counts until the end of the run (at least that long)."""
        times = [self.done.get(wf, self.now) - b for wf, b in self.began.items() if b >= since]
        assert times, "no workflow started in that span"
        return max(times)

    def unfinished_started(self) -> int:
        return sum(1 for wf in self.began if wf not in self.done)


def flood(seconds: float, downstream_first: bool) -> Flood:
    core = DispatchCore(downstream_first=downstream_first)  # aging as by default: 60 s a level
    core.fleet.upsert(
        WorkerView("w1", "default", "1.0", frozenset({"ingest", "encode"}), 64, 64_000, slots=4)
    )
    sim = Flood(core)
    sim.run(seconds)
    return sim


def test_started_workflows_finish_in_bounded_time_under_a_flood() -> None:
    short, long = flood(120, True), flood(480, True)
    # the same bound whether the flood lasted 2 or 8 minutes: a started workflow waits at
    # most for the encodes already queued, a tick or two
    assert short.worst_after_start(0) <= 3.0
    assert long.worst_after_start(240) <= 3.0
    assert long.unfinished_started() <= 4  # only those in their last seconds


def test_without_the_rule_started_workflows_take_longer_the_longer_the_flood() -> None:
    short, long = flood(120, False), flood(480, False)
    early, late = short.worst_after_start(0), long.worst_after_start(240)
    assert early > 10.0  # already far beyond the rule's bound
    assert late > 3 * early  # and growing with the flood, without a bound
    assert long.unfinished_started() > 100  # started, stuck behind new ingests


def test_the_downstream_type_goes_first_whatever_order_the_types_came_in() -> None:
    now = T0
    for rule, first in ((True, "down"), (False, "up")):
        core = DispatchCore(downstream_first=rule)
        core.fleet.upsert(
            WorkerView("w1", "default", "1.0", frozenset({"up", "down"}), 64, 64_000, slots=1)
        )
        core.fleet.workers["w1"].last_seen = now
        core.enqueue(ReadyTask("u", "wf2", "up", 4, now, now, steps_to_end=3))  # seen first
        core.enqueue(ReadyTask("d", "wf1", "down", 4, now, now, steps_to_end=0))
        (a,) = core.dispatch(now, lambda: "tok")
        assert isinstance(a, Assignment) and a.task.task_type == first


def test_priority_still_ranks_before_depth() -> None:
    now = T0
    core = DispatchCore()
    core.fleet.upsert(
        WorkerView("w1", "default", "1.0", frozenset({"up", "down"}), 64, 64_000, slots=1)
    )
    core.fleet.workers["w1"].last_seen = now
    core.enqueue(ReadyTask("d", "wf1", "down", 6, now, now, steps_to_end=0))
    core.enqueue(ReadyTask("u", "wf2", "up", 2, now, now, steps_to_end=3))
    (a,) = core.dispatch(now, lambda: "tok")
    assert isinstance(a, Assignment) and a.task.task_id == "u"


def one_slot(*types: str) -> DispatchCore:
    core = DispatchCore()
    core.fleet.upsert(WorkerView("w1", "default", "1.0", frozenset(types), 64, 64_000, slots=1))
    core.fleet.workers["w1"].last_seen = T0
    return core


def test_aging_still_lifts_a_task_past_other_levels_not_within_its_own() -> None:
    old = T0 - timedelta(seconds=600)  # waited 10 levels' worth of aging (60 s a level)
    same = one_slot("up", "down")
    same.enqueue(ReadyTask("u", "wf1", "up", 4, old, old, steps_to_end=3))
    same.enqueue(ReadyTask("d", "wf2", "down", 4, T0, T0, steps_to_end=0))
    (a,) = same.dispatch(T0, lambda: "tok")  # one level: the long wait does not overtake
    assert isinstance(a, Assignment) and a.task.task_id == "d"
    across = one_slot("low", "high")
    across.enqueue(ReadyTask("l", "wf3", "low", 8, old, old, steps_to_end=3))
    across.enqueue(ReadyTask("h", "wf4", "high", 2, T0, T0, steps_to_end=0))
    (b,) = across.dispatch(T0, lambda: "tok")  # aged to level 0: past the fresh level-2 task
    assert isinstance(b, Assignment) and b.task.task_id == "l"


def test_steps_to_end_counts_what_follows_in_each_enclosing_list() -> None:
    d, problems = parse_workflow(
        {
            "name": "media",
            "version": 1,
            "tasks": [
                {"name": "probe", "taskReferenceName": "probe"},
                {
                    "name": "fork",
                    "taskReferenceName": "fork",
                    "type": "FORK_JOIN",
                    "forkTasks": [
                        [
                            {"name": "transcode", "taskReferenceName": "t720"},
                            {"name": "thumbnail", "taskReferenceName": "thumb"},
                        ]
                    ],
                },
                {"name": "join", "taskReferenceName": "join", "type": "JOIN", "joinOn": ["thumb"]},
                {"name": "callback", "taskReferenceName": "notify"},
            ],
        }
    )
    assert d is not None, problems
    steps = {ref: steps_to_end(d, ref) for ref in ("probe", "t720", "thumb", "notify")}
    assert steps == {"probe": 3, "t720": 3, "thumb": 2, "notify": 0}
    assert steps_to_end(d, "not-in-the-definition") == 0
