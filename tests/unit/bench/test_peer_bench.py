"""The pure parts of bench/side_by_side.py: the rules that turn timestamps into the published
figures (bench/peer_stats.py), the README table, and the Celery canvas mirroring the JSON DAG."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from testkit import ROOT

sys.path.insert(0, str(ROOT / "bench"))  # the benches are scripts, not a package
import noop_worker
import peer_stats as ps

MEDIA = json.loads((ROOT / "examples" / "media_pipeline.json").read_text())


def test_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert ps.percentile(values, 0.5) == 50
    assert ps.percentile(values, 0.95) == 95
    assert ps.percentile(values, 0.99) == 99
    assert ps.percentile([7.0], 0.99) == 7
    assert ps.percentile([], 0.5) is None


def test_a_dag_that_never_completed_ranks_above_all_that_did() -> None:
    done = [float(v) for v in range(1, 91)]  # 90 completed, 10 never did
    assert ps.percentile(done, 0.5, missing=10) == 50
    assert ps.percentile(done, 0.9, missing=10) == 90
    assert ps.percentile(done, 0.95, missing=10) is None  # not the survivors' p95
    summary = ps.latency_summary(done, missing=10)
    assert summary == {"n": 90, "missing": 10, "p50": 50, "p95": None, "p99": None}


def _phase(
    rate: float, seconds: float, latency_s: float, completes_every: float = 1.0
) -> dict[str, Any]:
    """An open-loop phase from t0 = 100: DAG i submitted at 100 + i / rate, completing
    ``latency_s`` later when ``i`` is a multiple of ``completes_every``."""
    n = int(rate * seconds)
    submits = {f"d{i}": 100 + i / rate for i in range(n)}
    done = {
        k: t + latency_s for i, (k, t) in enumerate(submits.items()) if i % completes_every == 0
    }
    return ps.open_loop_figures(rate, seconds, submits, done, 100.0)


def test_a_load_kept_up_with_is_sustained() -> None:
    got = _phase(rate=10, seconds=20, latency_s=0.05)
    assert got["sustained"] is True
    assert got["completed_fraction"] == 1
    assert got["steady_completion_rate"] == pytest.approx(10, rel=0.02)
    assert got["latency_ms"]["p95"] == pytest.approx(50, abs=0.2)


def test_completing_half_is_not_sustained() -> None:
    got = _phase(rate=10, seconds=20, latency_s=0.05, completes_every=2)
    assert got["sustained"] is False
    assert got["completed_fraction"] == 0.5
    assert got["latency_ms"]["p95"] is None


def test_a_slow_system_that_keeps_up_is_sustained() -> None:
    # 3 s from submit to completion, every DAG, at the offered rate: slow, not saturated.
    got = _phase(rate=10, seconds=20, latency_s=3)
    assert got["sustained"] is True
    assert got["latency_ms"]["p50"] == 3000


def test_completing_at_half_the_rate_is_not_sustained_even_if_all_drain() -> None:
    rate, n = 10.0, 200
    submits = {f"d{i}": 100 + i / rate for i in range(n)}
    done = {f"d{i}": 100 + 0.1 + i / (rate / 2) for i in range(n)}  # one at a time, half speed
    got = ps.open_loop_figures(rate, n / rate, submits, done, 100.0)
    assert got["completed_fraction"] == 1
    assert got["steady_completion_rate"] == pytest.approx(5, rel=0.05)
    assert got["sustained"] is False


def test_closed_loop_rate_counts_from_the_first_submit() -> None:
    assert ps.closed_loop_rate(10.0, [11.0, 12.0, 14.0, 15.0]) == 0.8
    assert ps.closed_loop_rate(10.0, []) == 0


def test_median_of_ranks_missing_figures_highest() -> None:
    assert ps.median_of([3.0, 1.0, 2.0]) == 2
    assert ps.median_of([3.0, None, 1.0]) == 3
    assert ps.median_of([None, None, 1.0]) is None
    assert ps.median_of([1.0, 2.0, 3.0, 4.0]) == 2.5
    assert ps.median_of([1.0, 2.0, None, None]) is None
    assert ps.median_of([]) is None


def _system(top: float, p95s: list[float | None], sustained: int = 1) -> dict[str, Any]:
    loads = [
        {
            "share": s,
            "offered_per_second": s * top,
            "steady_completion_rate": s * top,
            "sustained": sustained > 0 and s <= 1,
            "latency_ms": {"p50": 1.0, "p95": p, "p99": p},
            "dispatch_ms": {"p50": 1.0, "p95": 2.0, "p99": 3.0},
        }
        for s, p in zip(ps.LOADS, p95s, strict=True)
    ]
    return {
        "max": {"per_second": top, "dispatch_ms": {"p50": 1, "p95": 2, "p99": 3}},
        "loads": loads,
    }


def _result() -> dict[str, Any]:
    runs = {
        "es-sched": _system(80, [10, 12, 15, 30, None]),
        "celery default": _system(40, [20, 24, 45, 90, 900]),
    }
    med = {k: ps.median_system([v]) for k, v in runs.items()}
    return {
        "runs": 1,
        "label": "test",
        "machine": {"cores": 2, "cpu": "cpu"},
        "median": {
            "systems": med,
            "ratios": ps.ratios(med, "es-sched", "celery default"),
            "kafka_limit": {"batch 500, bytes": 30000.0},
        },
    }


def test_ratios_are_ours_over_the_peer_from_the_same_medians() -> None:
    ratios = _result()["median"]["ratios"]
    assert ratios["max DAGs/s"] == 2
    assert ratios["sustained DAGs/s"] == 2  # best sustained: 80 vs 40 (the 100% loads)
    assert ratios["p95 celery default/es-sched @50%"] == 2
    assert ratios["p95 celery default/es-sched @125%"] is None  # ours did not complete


def test_table_has_a_row_per_system_and_says_what_did_not_complete() -> None:
    table = ps.markdown_table(_result())
    rows = [ln for ln in table.splitlines() if ln.startswith("| ")]
    assert rows[0].startswith("| system | max DAGs/s")
    assert rows[1] == "| es-sched | 80 | 80 | 10 | 12 | 15 | 30 | did not complete | 2 |"
    assert rows[2] == "| celery default | 40 | 40 | 20 | 24 | 45 | 90 | 900 | 2 |"
    assert "- max DAGs/s: 2" in table
    assert "- p95 celery default/es-sched @125%: n/a" in table
    assert "| batch 500, bytes | 30000 |" in table


def test_table_says_none_when_no_load_was_sustained() -> None:
    result = _result()
    for row in result["median"]["systems"]["es-sched"]["loads"]:
        row["sustained_runs"] = 0
    rows = [ln for ln in ps.markdown_table(result).splitlines() if ln.startswith("| es-sched")]
    assert rows[0].startswith("| es-sched | 80 | none |")


def test_table_goes_between_the_markers_only(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\nbefore\n{ps.BEGIN}\nold table\n{ps.END}\nafter\n")
    assert ps.write_table(readme, "| new |\n")
    assert readme.read_text() == f"# x\n\nbefore\n{ps.BEGIN}\n| new |\n{ps.END}\nafter\n"
    assert ps.write_table(readme, "| newer |\n")  # again: still one table
    assert readme.read_text().count("| ") == 1
    plain = tmp_path / "plain.md"
    plain.write_text("no markers\n")
    assert not ps.write_table(plain, "| new |\n")
    assert plain.read_text() == "no markers\n"


def _walk_1080(tasks: list[dict[str, Any]]) -> list[str]:
    """Every SIMPLE task on the 1080p path of the JSON, in document order (the oracle)."""
    out: list[str] = []
    for t in tasks:
        if t["type"] == "SIMPLE":
            out.append(t["taskReferenceName"])
        elif t["type"] == "SWITCH":
            out += _walk_1080(t["decisionCases"]["1080"])
        elif t["type"] == "FORK_JOIN":
            out += [b[0]["taskReferenceName"] for b in t["forkTasks"]]
    return out


def test_celery_canvas_mirrors_the_json_dag() -> None:
    celery_peer = pytest.importorskip(
        "celery_peer", reason="needs Celery, the bench extra: pip install -e '.[bench]'"
    )

    stages = celery_peer.dag_stages(MEDIA)
    assert [ref for s in stages for ref, _ in s] == _walk_1080(MEDIA["tasks"])
    assert len([ref for s in stages for ref, _ in s]) == 9
    assert [len(s) for s in stages] == [1, 4, 1, 1, 1, 1]  # the fork is the only parallel stage
    sig = celery_peer.canvas(stages, "dag-1")
    # Celery folds what follows a chord into the chord's body: the order it runs is the same.
    assert _run_order(sig) == [
        [(ref, name, ref == "notify_done") for ref, name in s] for s in stages
    ]
    assert type(sig).__name__ == "_chain"
    assert type(sig.tasks[1]).__name__ == "_chord"  # the join of the four transcodes


def _run_order(sig: Any) -> list[list[tuple[str, str, bool]]]:
    """A canvas as stages in the order Celery runs them: a chain's parts one after the other, a
    chord's header (a group: in parallel) then its body."""
    kind = type(sig).__name__
    if kind == "_chain":
        return [stage for part in sig.tasks for stage in _run_order(part)]
    if kind == "_chord":
        header = [t for stage in _run_order(sig.tasks) for t in stage]
        return [header, *_run_order(sig.body)]
    if kind in ("group", "list", "tuple"):  # a chord keeps its header as a group or a list
        parts = sig.tasks if kind == "group" else sig
        return [[t for part in parts for stage in _run_order(part) for t in stage]]
    assert kind == "Signature", kind
    assert sig.immutable  # no-op bodies: no result passed from one task to the next
    return [[(sig.args[1], sig.task, sig.args[2])]]


def test_es_sched_noop_probe_takes_the_1080p_branch() -> None:
    probed = noop_worker.probe(None, {"uri": "file:///x.mp4"})  # type: ignore[arg-type]
    assert probed["height"] >= 1080  # the SWITCH: $.height >= 1080 ? '1080' : ...
    forks = MEDIA["tasks"][1]["decisionCases"]["1080"][0]["forkTasks"]
    wanted = {b[0]["resources"].split(".")[-1].rstrip("}") for b in forks}
    assert wanted <= set(probed["estimates"])
    assert probed["uri"] == "file:///x.mp4"
