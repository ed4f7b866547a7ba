"""The learned-cost rule (ADR 66): a cost estimate corrected by what its size class measured,
within bounds, and nothing else touched."""

from __future__ import annotations

import math
from typing import Any

import pytest

from es_sched.domain.definitions import resources_of
from es_sched.domain.learned import RunStats, size_class
from es_sched.domain.learned_cost import (
    LEARNED_KEY,
    MIN_SAMPLES,
    RATIO_BOUNDS,
    cores_for,
    correct,
)
from es_sched.workers.media.cost import estimate, estimate_grid


def estimated(cpu_seconds: float = 60.0, cpu_max: float = 4.0, **kw: Any) -> dict[str, Any]:
    """Resources as the media cost model declares them: 1 cpu for 60 cpu-seconds."""
    inputs = {"model": "media-cost/1", "cpu_seconds": cpu_seconds, "cpu_max": cpu_max}
    inputs |= {"accel": "cpu", "codec": "h264", "height": 720, "duration_s": 30.0}
    inputs |= kw.pop("inputs", {})
    return {"cpu": cores_for(cpu_seconds, cpu_max), "memory_mb": 512, "inputs": inputs, **kw}


def stats(ratio: float | None = 2.5, memory: float | None = 600.0, samples: int = 10) -> RunStats:
    return RunStats(
        task_type="media.transcode",
        size_class="h720-d60-h264",
        window_end="2026-12-07T14:00:00Z",
        samples=samples,
        run_p50_s=1.0,
        run_p95_s=2.0,
        run_p99_s=3.0,
        wait_p50_s=0.1,
        wait_p95_s=0.2,
        failures=0,
        failure_rate=0.0,
        cost_ratio=ratio,
        memory_p95_mb=memory,
    )


def test_the_ratio_scales_the_cpu_seconds_and_the_model_sizes_them_again() -> None:
    declared = estimated()
    assert declared["cpu"] == 1.0
    done = correct(declared, stats(ratio=2.5))
    assert done is not None
    assert done.resources["cpu"] == 2.5  # 150 cpu-seconds in about a minute
    assert done.cost_ratio == 2.5
    learned = done.resources[LEARNED_KEY]
    assert learned["cost_ratio"] == 2.5 and learned["cpu_seconds"] == 150.0
    assert learned["estimate"] == {"cpu": 1.0, "memory_mb": 512}  # estimate beside learned
    assert (learned["size_class"], learned["samples"]) == ("h720-d60-h264", 10)
    assert declared["cpu"] == 1.0 and LEARNED_KEY not in declared  # the input is not changed


def test_a_ratio_below_one_gives_cores_back_but_never_below_the_floor() -> None:
    done = correct(estimated(cpu_seconds=180.0), stats(ratio=0.5, memory=None))
    assert done is not None and done.resources["cpu"] == 1.5  # 3 cpus estimated
    floor = correct(estimated(cpu_seconds=60.0), stats(ratio=0.3, memory=None))
    assert floor is not None and floor.resources["cpu"] == 0.5


def test_the_learned_memory_p95_with_headroom_replaces_the_estimate() -> None:
    done = correct(estimated(), stats(ratio=None, memory=600.0))
    assert done is not None
    assert done.resources["memory_mb"] == 768  # 600 x 1.25, in 64 MiB steps
    assert done.resources["cpu"] == 1.0  # no ratio: cpu as estimated
    assert done.cost_ratio is None and done.memory_mb == 768
    assert "cost_ratio" not in done.resources[LEARNED_KEY]


@pytest.mark.parametrize(
    ("ratio", "applied"), [(50.0, RATIO_BOUNDS[1]), (0.01, RATIO_BOUNDS[0]), (1e9, 4.0)]
)
def test_a_wild_ratio_is_clamped_to_the_bounds(ratio: float, applied: float) -> None:
    done = correct(estimated(cpu_seconds=60.0, cpu_max=8.0), stats(ratio=ratio, memory=None))
    assert done is not None and done.cost_ratio == applied
    assert done.resources["cpu"] == cores_for(60.0 * applied, 8.0)


def test_the_cpu_never_exceeds_what_the_model_allowed() -> None:
    done = correct(estimated(cpu_seconds=100.0, cpu_max=2.0), stats(ratio=4.0, memory=None))
    assert done is not None and done.resources["cpu"] == 2.0  # 400 cpu-s would want 7


def test_wild_memory_is_clamped_to_the_bounds() -> None:
    low = correct(estimated(), stats(ratio=None, memory=1.0))
    high = correct(estimated(), stats(ratio=None, memory=1e6))
    assert low is not None and low.resources["memory_mb"] == 512 * RATIO_BOUNDS[0]
    assert high is not None and high.resources["memory_mb"] == 512 * RATIO_BOUNDS[1]


def test_no_stats_few_samples_or_nothing_learned_leave_the_estimate() -> None:
    assert correct(estimated(), None) is None
    assert correct(estimated(), stats(samples=MIN_SAMPLES - 1)) is None
    assert correct(estimated(), stats(ratio=None, memory=None)) is None
    assert correct(estimated(), stats(ratio=math.nan, memory=math.inf)) is None
    assert correct(estimated(), stats(ratio=-1.0, memory=0.0)) is None
    assert correct(estimated(), stats(samples=MIN_SAMPLES)) is not None


def test_resources_that_are_no_estimate_are_untouched() -> None:
    assert correct({"cpu": 1.0, "memory_mb": 512}, stats()) is None  # a person wrote them
    assert correct({}, stats()) is None
    assert correct({"cpu": 1.0, "inputs": "h264"}, stats()) is None


def test_a_gpu_path_estimate_is_untouched() -> None:
    gpu = estimated(inputs={"accel": "gpu"}, gpu_memory_mb=512)
    assert correct(gpu, stats()) is None


def test_the_cost_model_sizes_its_estimates_by_the_same_rule() -> None:
    for height in (360, 720, 1080, 2160):
        for duration in (5.0, 60.0, 600.0):
            est = estimate(duration, 1920, 1080, height, "h265", fps=30.0, max_cpu=4.0)
            assert est.resources["cpu"] == cores_for(est.cpu_seconds, est.cpu_max)
            # a ratio of one changes no cpu: the correction is the model's own sizing
            declared = {**est.resources, "inputs": est.declared_inputs()}
            done = correct(declared, stats(ratio=1.0, memory=None))
            assert done is not None and done.resources["cpu"] == est.resources["cpu"]


def test_an_estimate_keeps_its_inputs_through_scheduling_and_gives_the_size_class() -> None:
    grid = estimate_grid(42.0, 1280, 720, 25.0, max_cpu=2.0)["estimates"]
    resolved = resources_of(grid["h264_720"]).as_dict()
    assert resolved["inputs"]["cpu_seconds"] > 0
    assert resolved["inputs"]["duration_s"] == 42.0
    assert size_class({"height": 720, "codec": "h264"}, resolved) == "h720-d60-h264"
    assert "inputs" not in resources_of({"cpu": 1}).as_dict()  # other resources as before
    with pytest.raises(ValueError, match="inputs must be an object"):
        resources_of({"cpu": 1, "inputs": 3})
