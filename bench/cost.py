"""How far the media cost estimate is from what ffmpeg measures, before and after learning (ADR 66).

On the demo's videos (``es_sched.cli.demo.pipeline.make_videos``: testsrc2 clips, 480p to 1080p,
2 to 10 s, the same seed), every transcode examples/media_pipeline.json asks of each video (its
ladder: H.264 at and below the source's height, H.265 at 720p) is run with the real ffmpeg
command the worker runs (``transcode_command``, threads from the declared cpu, ``run_ffmpeg``),
and compared with the estimate it would declare (the probe's ``estimate_grid`` entry it names).
Measured: ffmpeg's own cpu-seconds (user + system) and peak resident memory, from ``wait4``, so
other load on the shared machine changes them little (wall time it would change a lot).

A first pass learns, per size class (``domain.learned.size_class``: height class, duration
bucket, codec), what the analytics role would propose: ``cost_ratio`` = median of measured /
estimated cpu-seconds, ``memory_p95_mb`` = P95 of the peak memory. Three more passes are each
evaluated three ways against what they measured: the estimate, the estimate corrected by the
learned figures (``domain.learned_cost.correct``, the dispatcher's rule: bounds, minimum
samples and all), and the cpu each would declare. A figure is the median over the class's
transcodes in one pass, then the median of the three passes.

Writes bench/results/current/cost.json; docs/performance.md's "Learned cost" section reads it.
Needs ffmpeg and ffprobe on PATH (`es-sched stack up` installs them); no stack.
Rerun: `PYTHONPATH=. .venv/bin/python bench/cost.py --videos 6 --evaluations 3`
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import tempfile
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from es_sched.cli.demo.pipeline import make_videos
from es_sched.domain.learned import RunStats, size_class, to_record
from es_sched.domain.learned_cost import LEARNED_KEY, MIN_SAMPLES, correct
from es_sched.settings import MediaSettings
from es_sched.workers.media import cost
from es_sched.workers.media.command import Rendition, transcode_command
from es_sched.workers.media.probe import probe
from es_sched.workers.media.proc import run_ffmpeg, tool

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "results" / "current" / "cost.json"
PIPELINE = ROOT / "examples" / "media_pipeline.json"
TRANSCODE = "media.transcode"
Row = dict[str, Any]


def ladders(pipeline: dict[str, Any]) -> dict[str, list[Row]]:
    """The pipeline's SWITCH ``ladder``: case -> its transcodes' inputs and the grid key each
    declares (``${probe.output.estimates.<key>}``)."""
    switch = next(t for t in pipeline["tasks"] if t["taskReferenceName"] == "ladder")
    cases = {**switch["decisionCases"], "480": switch["defaultCase"]}
    out: dict[str, list[Row]] = {}
    for case, tasks in cases.items():
        fork = next(t for t in tasks if t["type"] == "FORK_JOIN")
        out[case] = [
            {**branch[0]["inputParameters"], "key": branch[0]["resources"].split(".")[-1][:-1]}
            for branch in fork["forkTasks"]
        ]
    return out


def case_of(height: int) -> str:
    """The case the ladder's expression picks for a source ``height`` high."""
    return "1080" if height >= 1080 else "720" if height >= 720 else "480"


def one_pass(videos: list[Row], ffmpeg: str, work: Path) -> list[Row]:
    """Every transcode of every video, once: the estimate it declares and what ffmpeg used."""
    rows = []
    for v in videos:
        for t in v["transcodes"]:
            declared = v["grid"][t["key"]]
            r = Rendition(height=t["height"], codec=t["codec"], crf=t["crf"], preset=t["preset"])
            out = work / f"{v['name']}-{t['name']}.mp4"
            threads = max(1, math.ceil(declared["cpu"]))
            argv = transcode_command(ffmpeg, v["path"], out, r, threads=threads)
            usage = run_ffmpeg(argv, threading.Event())
            out.unlink(missing_ok=True)
            task_input = {"height": t["height"], "codec": t["codec"]}
            rows.append(
                {
                    "video": v["name"],
                    "rendition": t["name"],
                    "preset": t["preset"],
                    "size_class": size_class(task_input, declared),
                    "declared": declared,
                    "estimated_cpu_s": declared["inputs"]["cpu_seconds"],
                    "measured_cpu_s": round(usage.cpu_s, 3),
                    "peak_memory_mb": round(usage.peak_memory_mb, 1),
                    "wall_s": round(usage.wall_s, 3),
                }
            )
            print(
                f"  {v['name']} {t['name']:>10}: estimated {rows[-1]['estimated_cpu_s']:7.2f} "
                f"cpu-s, measured {usage.cpu_s:7.2f}, peak {usage.peak_memory_mb:6.0f} MiB",
                flush=True,
            )
    return rows


def p95(values: list[float]) -> float:
    """Nearest rank, as a small window's P95 is: the largest of fewer than 20 samples."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


def learn(rows: list[Row], when: str) -> dict[str, RunStats]:
    """What the analytics role would propose per size class from these runs."""
    by_class: dict[str, list[Row]] = {}
    for row in rows:
        by_class.setdefault(row["size_class"], []).append(row)
    learned = {}
    for subject, runs in sorted(by_class.items()):
        ratios = [r["measured_cpu_s"] / r["estimated_cpu_s"] for r in runs]
        walls = [r["wall_s"] for r in runs]
        learned[subject] = RunStats(
            task_type=TRANSCODE,
            size_class=subject,
            window_end=when,
            samples=len(runs),
            run_p50_s=statistics.median(walls),
            run_p95_s=p95(walls),
            run_p99_s=max(walls),
            wait_p50_s=0.0,
            wait_p95_s=0.0,
            failures=0,
            failure_rate=0.0,
            cost_ratio=round(statistics.median(ratios), 4),
            memory_p95_mb=p95([r["peak_memory_mb"] for r in runs]),
        )
    return learned


def error_pct(figure: float, measured: float) -> float:
    return abs(figure - measured) / measured * 100 if measured > 0 else 0.0


def evaluate(rows: list[Row], learned: dict[str, RunStats]) -> dict[str, Row]:
    """Per size class, one pass: estimate and corrected estimate against what was measured."""
    per: dict[str, list[Row]] = {}
    for row in rows:
        declared = row["declared"]
        fixed = correct(declared, learned.get(row["size_class"]))
        placed = declared if fixed is None else fixed.resources
        used = placed.get(LEARNED_KEY, {})
        corrected = used.get("cpu_seconds", row["estimated_cpu_s"])
        per.setdefault(row["size_class"], []).append(
            {
                "estimated_cpu_s": row["estimated_cpu_s"],
                "corrected_cpu_s": corrected,
                "measured_cpu_s": row["measured_cpu_s"],
                "error_before_pct": error_pct(row["estimated_cpu_s"], row["measured_cpu_s"]),
                "error_after_pct": error_pct(corrected, row["measured_cpu_s"]),
                "cpu_before": declared["cpu"],
                "cpu_after": placed["cpu"],
                "memory_estimated_mb": declared["memory_mb"],
                "memory_corrected_mb": placed["memory_mb"],
                "peak_memory_mb": row["peak_memory_mb"],
                "corrected": fixed is not None,
            }
        )
    out: dict[str, Row] = {}
    for subject, runs in sorted(per.items()):
        med = {k: statistics.median(r[k] for r in runs) for k in runs[0] if k != "corrected"}
        out[subject] = {
            **{k: round(v, 3) for k, v in med.items()},
            "peak_memory_mb": max(r["peak_memory_mb"] for r in runs),
            "transcodes": len(runs),
            "corrected": all(r["corrected"] for r in runs),
        }
    every = [r for runs in per.values() for r in runs]
    out["all"] = {
        "error_before_pct": round(statistics.median(r["error_before_pct"] for r in every), 3),
        "error_after_pct": round(statistics.median(r["error_after_pct"] for r in every), 3),
        "transcodes": len(every),
    }
    return out


def main(argv: list[str] = sys.argv[1:]) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--videos", type=int, default=6, help="as `es-sched demo --videos`")
    ap.add_argument("--evaluations", type=int, default=3, help="passes after the learning one")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    started = datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    ffmpeg, ffprobe = tool("ffmpeg"), tool("ffprobe")
    max_cpu = MediaSettings().max_cpu
    plan = ladders(json.loads(PIPELINE.read_text()))
    with tempfile.TemporaryDirectory(prefix="es-sched-bench-cost-") as tmp:
        work = Path(tmp)
        videos = []
        for clip in make_videos(work / "in", args.videos):
            if clip.broken:
                continue
            p = probe(clip.path, ffprobe)
            grid = cost.estimate_grid(p["duration"], p["width"], p["height"], p["fps"], max_cpu)
            videos.append(
                {
                    "name": clip.path.stem,
                    "path": clip.path,
                    "height": p["height"],
                    "duration_s": p["duration"],
                    "grid": grid["estimates"],
                    "transcodes": plan[case_of(p["height"])],
                }
            )
        print(f"learning pass over {sum(len(v['transcodes']) for v in videos)} transcodes")
        learning = one_pass(videos, ffmpeg, work)
        learned = learn(learning, started)
        passes = []
        for i in range(args.evaluations):
            print(f"evaluation pass {i + 1}/{args.evaluations}")
            passes.append(one_pass(videos, ffmpeg, work))
    evaluations = [evaluate(rows, learned) for rows in passes]
    classes = {}
    for subject in evaluations[0]:
        keys = [k for k in evaluations[0][subject] if k not in ("transcodes", "corrected")]
        classes[subject] = {
            **{k: round(statistics.median(e[subject][k] for e in evaluations), 3) for k in keys},
            "transcodes": evaluations[0][subject]["transcodes"],
        }
        if subject != "all":
            stats = learned[subject]
            classes[subject] |= {
                "corrected": evaluations[0][subject]["corrected"],
                "learned_samples": stats.samples,
                "learned_cost_ratio": stats.cost_ratio,
                "learned_memory_p95_mb": stats.memory_p95_mb,
            }
    doc = {
        "question": "the media cost estimate against measured cpu-seconds and memory, before "
        "and after the learned correction, on the demo's videos",
        "started": started,
        "machine": {
            "cores": os.cpu_count(),
            "python": platform.python_version(),
            "kernel": platform.release(),
        },
        "videos": [
            {"name": v["name"], "height": v["height"], "duration_s": v["duration_s"]}
            for v in videos
        ],
        "settings": {"max_cpu": max_cpu, "min_samples": MIN_SAMPLES, "model": cost.MODEL},
        "runs": args.evaluations,
        "learned": {k: to_record(s) for k, s in learned.items()},
        "classes": classes,
        "learning_pass": [{k: v for k, v in r.items() if k != "declared"} for r in learning],
        "evaluation_passes": [
            [{k: v for k, v in r.items() if k != "declared"} for r in rows] for rows in passes
        ],
        "evaluations": evaluations,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    for subject, c in classes.items():
        print(f"{subject:>16}: error {c['error_before_pct']:6.1f}% -> {c['error_after_pct']:6.1f}%")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
