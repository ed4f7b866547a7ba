"""The pure arithmetic of bench/side_by_side.py: percentiles, the sustained-load rule, medians of
runs, ratios and the README table. No I/O here but ``write_table``, so the rules that turn raw
timestamps into the published figures are unit-tested (tests/unit/bench/test_peer_bench.py).

Rules, one place each:
- a percentile is the nearest-rank value of every DAG offered; a DAG that never completed counts
  as slower than all that did, so a percentile that lands on one is ``None`` ("did not complete"),
  never the percentile of the survivors alone (that would flatter an overloaded system);
- a load is sustained when the completion rate in the steady window (after a warm-up of a fifth
  of the duration, until the end of offering; both shifted by the phase's median latency, when
  the DAGs offered then complete) is at least 95% of the offered rate AND at least 95% of the
  DAGs offered completed by the end of the drain;
- a median of runs ranks a missing figure above every number (an even count whose upper
  middle is missing is missing).
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

SUSTAINED = 0.95
WARMUP_FRACTION = 0.2
LOADS = (0.25, 0.5, 0.75, 1.0, 1.25)
BEGIN, END = "<!-- side_by_side:begin -->", "<!-- side_by_side:end -->"


def percentile(values: Sequence[float], q: float, missing: int = 0) -> float | None:
    """Nearest-rank ``q`` percentile of ``values`` plus ``missing`` values slower than all."""
    n = len(values) + missing
    if n == 0:
        return None
    rank = max(1, math.ceil(q * n))
    ordered = sorted(values)
    return round(ordered[rank - 1], 1) if rank <= len(ordered) else None


def latency_summary(values_ms: Sequence[float], missing: int = 0) -> dict[str, Any]:
    return {
        "n": len(values_ms),
        "missing": missing,
        **{f"p{q}": percentile(values_ms, q / 100, missing) for q in (50, 95, 99)},
    }


def open_loop_figures(
    offered_rate: float,
    seconds: float,
    submits: dict[str, float],
    completions: dict[str, float],
    t0: float,
) -> dict[str, Any]:
    """Throughput and submit-to-completion latency of one open-loop phase.

    ``submits`` maps DAG id to its *intended* submit time (t0 + n / rate: a late submitter does
    not hide queueing, no coordinated omission), ``completions`` DAG id to completion time; both
    on one clock, in seconds."""
    done = [completions[k] - s for k, s in submits.items() if k in completions]
    # The window where the DAGs offered in the steady part complete: shifted by the median
    # latency, so a slow but keeping-up system is not counted short (its latency shows that).
    lag = statistics.median(done) if done else 0.0
    warm = t0 + seconds * WARMUP_FRACTION + lag
    end = t0 + seconds + lag
    steady = sum(1 for k, t in completions.items() if k in submits and warm <= t < end)
    rate = steady / (end - warm)
    lat_ms = [d * 1000 for d in done]
    fraction = len(done) / len(submits) if submits else 0.0
    return {
        "offered_per_second": round(offered_rate, 2),
        "offered": len(submits),
        "completed": len(done),
        "completed_fraction": round(fraction, 4),
        "steady_completion_rate": round(rate, 2),
        "sustained": sustained(offered_rate, rate, fraction),
        "latency_ms": latency_summary(lat_ms, len(submits) - len(done)),
    }


def sustained(offered_rate: float, steady_rate: float, completed_fraction: float) -> bool:
    return steady_rate >= SUSTAINED * offered_rate and completed_fraction >= SUSTAINED


def closed_loop_rate(first_submit: float, completions: Iterable[float]) -> float:
    """DAGs per second of a burst: count / (last completion - first submit)."""
    ends = list(completions)
    if not ends:
        return 0.0
    return round(len(ends) / max(max(ends) - first_submit, 1e-9), 2)


def median_of(values: Iterable[float | None]) -> float | None:
    """Median where a missing figure (``None``: did not complete) ranks above every number."""
    got = sorted((math.inf if v is None else v) for v in values)
    if not got:
        return None
    mid = statistics.median_high(got) if len(got) % 2 == 0 else statistics.median(got)
    if len(got) % 2 == 0 and math.isfinite(mid):
        mid = statistics.median(got)
    return round(mid, 2) if math.isfinite(mid) else None


def _dig(doc: Any, path: Sequence[str | int]) -> Any:
    for key in path:
        if doc is None:
            return None
        doc = doc[key] if isinstance(key, int) else doc.get(key)
    return doc


def median_system(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Medians over runs of one system: max rate, and per load level every figure."""
    out: dict[str, Any] = {
        "max_per_second": median_of(r["max"]["per_second"] for r in runs),
        "dispatch_ms_at_max": {
            q: median_of(_dig(r, ["max", "dispatch_ms", q]) for r in runs)
            for q in ("p50", "p95", "p99")
        },
        "loads": [],
    }
    for i, share in enumerate(LOADS):
        rows = [r["loads"][i] for r in runs if i < len(r["loads"])]
        out["loads"].append(
            {
                "share": share,
                "offered_per_second": median_of(x["offered_per_second"] for x in rows),
                "steady_completion_rate": median_of(x["steady_completion_rate"] for x in rows),
                "sustained_runs": sum(1 for x in rows if x["sustained"]),
                "runs": len(rows),
                "latency_ms": {
                    q: median_of(x["latency_ms"][q] for x in rows) for q in ("p50", "p95", "p99")
                },
                "dispatch_ms": {
                    q: median_of(x["dispatch_ms"][q] for x in rows) for q in ("p50", "p95", "p99")
                },
            }
        )
    return out


def best_sustained(system: dict[str, Any]) -> float | None:
    """The highest median completion rate at a load most runs sustained."""
    ok = [
        x["steady_completion_rate"]
        for x in system["loads"]
        if x["sustained_runs"] * 2 > x["runs"] and x["steady_completion_rate"] is not None
    ]
    return max(ok) if ok else None


def ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 2) if a is not None and b else None


def _ms(v: float | None, missing: str = "did not complete") -> str:
    return missing if v is None else f"{v:g}"


def markdown_table(result: dict[str, Any]) -> str:
    """The README table: one row per system (burst maximum, best sustained rate, p95 at each
    load, dispatch p95 at 50%), the ratios, the limit."""
    systems: dict[str, Any] = result["median"]["systems"]
    lines = [
        f"Side by side in one run, medians of {result['runs']} "
        f"({result['machine']['cores']} cores, {result['machine']['cpu']}; {result['label']}). "
        "Submit-to-completion p95 in ms at each offered load (% of the system's own maximum).",
        "",
        "| system | max DAGs/s (burst) | sustained DAGs/s | "
        + " | ".join(f"p95 ms @{int(s * 100)}%" for s in LOADS)
        + " | dispatch p95 ms @50% |",
        "|---|---:|---:|" + "---:|" * len(LOADS) + "---:|",
    ]
    for name, s in systems.items():
        cells = [_ms(x["latency_ms"]["p95"]) for x in s["loads"]]
        half = s["loads"][LOADS.index(0.5)]["dispatch_ms"]["p95"]
        lines.append(
            f"| {name} | {_ms(s['max_per_second'])} | {_ms(best_sustained(s), 'none')} | "
            + " | ".join(cells)
            + f" | {_ms(half)} |"
        )
    ratios = result["median"].get("ratios", {})
    if ratios:
        lines += [
            "",
            "Ratios from the same run (es-sched / Celery default; for p95, Celery's "
            "over es-sched's, above 1 = es-sched faster):",
            "",
        ]
        lines += [f"- {k}: {_ms(v, 'n/a')}" for k, v in ratios.items()]
    limit = result["median"].get("kafka_limit")
    if limit:
        lines += [
            "",
            "| the limit: transactional consume -> produce loop | records/s |",
            "|---|---:|",
        ]
        lines += [f"| {k} | {_ms(v, 'n/a')} |" for k, v in limit.items()]
    return "\n".join(lines) + "\n"


def ratios(systems: dict[str, Any], ours: str, peer: str) -> dict[str, float | None]:
    """es-sched / peer: DAGs/s (burst and sustained), and the peer's p95 over ours per load (a
    figure above 1 means es-sched is faster at that load)."""
    a, b = systems[ours], systems[peer]
    out: dict[str, float | None] = {
        "max DAGs/s": ratio(a["max_per_second"], b["max_per_second"]),
        "sustained DAGs/s": ratio(best_sustained(a), best_sustained(b)),
    }
    for x, y in zip(a["loads"], b["loads"], strict=True):
        out[f"p95 {peer}/{ours} @{int(x['share'] * 100)}%"] = ratio(
            y["latency_ms"]["p95"], x["latency_ms"]["p95"]
        )
    return out


def write_table(readme: Path, table: str) -> bool:
    """Replace what is between the markers in ``readme``; False (file untouched) without them."""
    text = readme.read_text()
    if BEGIN not in text or END not in text:
        return False
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    readme.write_text(f"{head}{BEGIN}\n{table}{END}{tail}")
    return True


def write_result(out: Path, result: dict[str, Any]) -> None:
    """A bench's JSON under bench/results/current (or ``--out``), said where."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {out}")
