"""The dispatcher core places a cost estimate by what its size class measured (ADR 66): a fleet
where the raw estimate fits one worker and the corrected need only another, and back."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime
from typing import Any

from es_sched.dispatch import records as dispatch_records
from es_sched.dispatch.core.engine import Assignment, DispatchCore
from es_sched.dispatch.core.placement import WorkerView
from es_sched.dispatch.core.queues import ReadyTask
from es_sched.domain.learned import RunStats
from es_sched.domain.learned_cost import LEARNED_KEY

T0 = datetime(2026, 12, 7, 14, 0, tzinfo=UTC)
TRANSCODE = "media.transcode"
tokens = (f"tok-{i}" for i in itertools.count())


def token() -> str:
    return next(tokens)


def stats(ratio: float | None, memory: float | None = None) -> RunStats:
    return RunStats(
        TRANSCODE,
        "h720-d60-h264",
        "2026-12-07T13:59:00Z",
        20,
        30.0,
        60.0,
        70.0,
        0.1,
        0.5,
        0,
        0.0,
        cost_ratio=ratio,
        memory_p95_mb=memory,
    )


class Lookups:
    """The StatsView's ``runtime`` as a dict, and what was asked of it."""

    def __init__(self, known: dict[tuple[str, str], RunStats]) -> None:
        self.known, self.asked = known, list[tuple[str, str]]()

    def __call__(self, task_type: str, subject: str) -> RunStats | None:
        self.asked.append((task_type, subject))
        return self.known.get((task_type, subject))


def estimated_task(task_id: str, cpu_seconds: float = 60.0, memory_mb: int = 512) -> ReadyTask:
    """A 720p H.264 transcode of a 30 s source, declaring the cost model's estimate: 1 cpu."""
    inputs = {"model": "media-cost/1", "cpu_seconds": cpu_seconds, "cpu_max": 2.0}
    inputs |= {"accel": "cpu", "codec": "h264", "height": 720, "duration_s": 30.0}
    resources = {"cpu": 1.0, "memory_mb": memory_mb, "gpu_memory_mb": 0, "custom": {}}
    resources["inputs"] = inputs
    payload = {"input": {"height": 720, "codec": "h264"}, "resources": resources}
    return ReadyTask(
        task_id, f"wf-{task_id}", TRANSCODE, 4, T0, T0, resources=resources, payload=payload
    )


def core(learned: Lookups | None, *workers: tuple[str, float, int]) -> DispatchCore:
    c = DispatchCore(learned=learned)
    for wid, cpu, memory in workers:
        view = WorkerView(wid, "default", "1", frozenset({TRANSCODE, "other"}), cpu, memory)
        view.last_seen = T0
        c.fleet.upsert(view)
    return c


def assigned(c: DispatchCore) -> list[Assignment]:
    return [d for d in c.dispatch(T0, token) if isinstance(d, Assignment)]


SMALL, LARGE = ("small", 1.0, 4096), ("large", 2.0, 4096)


def test_without_learned_stats_the_estimate_fits_the_tightest_worker() -> None:
    for learned in (None, Lookups({})):
        c = core(learned, SMALL, LARGE)
        c.enqueue(estimated_task("t"))
        (a,) = assigned(c)
        assert a.placement.worker_id == "small"  # binpack: 1 cpu fits the 1-cpu worker
        assert a.resources is None and a.placed_by["cpu"] == 1.0


def test_a_learned_ratio_places_by_the_corrected_need() -> None:
    learned = Lookups({(TRANSCODE, "h720-d60-h264"): stats(ratio=2.0)})
    c = core(learned, SMALL, LARGE)
    c.enqueue(estimated_task("t"))
    (a,) = assigned(c)
    assert learned.asked == [(TRANSCODE, "h720-d60-h264")]
    assert a.placement.worker_id == "large"  # 120 cpu-seconds want 2 cpus: not the small one
    assert a.placed_by["cpu"] == 2.0
    assert c.fleet.workers["large"].reserved_cpu == 2.0  # reserved what it was placed by
    record, _ = dispatch_records.assignment(a)
    assert record.resources["cpu"] == 2.0  # the worker admits it by the same figures
    assert record.resources[LEARNED_KEY]["estimate"]["cpu"] == 1.0
    assert record.resources[LEARNED_KEY]["cost_ratio"] == 2.0
    c.finished("t")
    assert c.fleet.workers["large"].reserved_cpu == 0.0  # released what it reserved


def test_a_corrected_need_that_fits_nowhere_waits_and_one_that_fits_again_goes() -> None:
    """Only the small worker: the corrected need waits for room it will never get there, while
    the raw estimate would have overcommitted it; a lower ratio later lets it go."""
    learned = Lookups({(TRANSCODE, "h720-d60-h264"): stats(ratio=2.0)})
    c = core(learned, SMALL)
    c.enqueue(estimated_task("t"))
    assert assigned(c) == []
    learned.known[(TRANSCODE, "h720-d60-h264")] = stats(ratio=0.9)
    (a,) = assigned(c)
    assert (a.placement.worker_id, a.placed_by["cpu"]) == ("small", 1.0)


def test_learned_memory_lets_an_overestimated_task_onto_a_smaller_worker() -> None:
    tight = ("tight", 2.0, 1024)
    estimate = estimated_task("t", memory_mb=2048)
    c = core(None, tight)
    c.enqueue(estimate)
    assert assigned(c) == []  # 2 GiB estimated, 1 GiB offered
    learned = Lookups({(TRANSCODE, "h720-d60-h264"): stats(ratio=None, memory=700.0)})
    c = core(learned, tight)
    c.enqueue(estimated_task("t", memory_mb=2048))
    (a,) = assigned(c)
    assert (a.placement.worker_id, a.placed_by["memory_mb"]) == ("tight", 896)


def test_a_task_without_an_estimate_is_placed_as_declared_and_not_looked_up() -> None:
    learned = Lookups({(TRANSCODE, "h720-d60-h264"): stats(ratio=4.0)})
    c = core(learned, SMALL, LARGE)
    resources: dict[str, Any] = {"cpu": 1.0, "memory_mb": 512}
    c.enqueue(ReadyTask("x", "wf-x", "other", 4, T0, T0, resources=resources))
    (a,) = assigned(c)
    assert learned.asked == []
    assert (a.placement.worker_id, a.resources) == ("small", None)
