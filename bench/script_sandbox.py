"""What the script sandbox process costs (ADR 76): one evaluation in a killable child process
(``scripting.sandbox.ProcessSandbox``) against one in the calling process
(``scripting.quickjs.QuickJsEngine``), and how long a runaway holds the caller.

Per engine and round, ``--evaluations`` distinct small scripts (``$.a + i``: distinct, so no
memo answers them), then as many repeats of one (``*_repeat_us``: the memo's answers),
interleaved by round; ``--runs`` rounds (default 3), medians
reported. Then, once each: an infinite loop (QuickJS's interrupt stops it in the child) and a
backtracking regular expression (the sandbox's wall-time deadline kills the child), as the
wall time the caller waited. No services needed.

Writes bench/results/current/script_sandbox.json.
Rerun: `PYTHONPATH=. .venv/bin/python bench/script_sandbox.py [--runs 3 --evaluations 2000]`
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from datetime import UTC, datetime
from pathlib import Path

from es_sched.domain.scripts import ScriptEngine
from es_sched.scripting.quickjs import QuickJsEngine
from es_sched.scripting.sandbox import ProcessSandbox

OUT = Path(__file__).parent / "results" / "current" / "script_sandbox.json"


def per_evaluation_us(
    engine: ScriptEngine, evaluations: int, round_: int, repeat: bool = False
) -> float:
    started = time.perf_counter()
    for i in range(evaluations):
        result = engine.evaluate(f"$.a + {0 if repeat else i}", {"a": round_})
        assert result.ok, result
    return (time.perf_counter() - started) / evaluations * 1e6


def waited_s(engine: ScriptEngine, script: str) -> tuple[float, str]:
    started = time.perf_counter()
    result = engine.evaluate(script, {})
    return time.perf_counter() - started, str(result.error)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--evaluations", type=int, default=2000)
    args = parser.parse_args()
    started = datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    inline, sandbox = QuickJsEngine(), ProcessSandbox()
    sandbox.evaluate("1", {})  # the child's start is not an evaluation's cost
    rounds: dict[str, list[float]] = {
        "in_process_us": [],
        "sandbox_us": [],
        "in_process_repeat_us": [],
        "sandbox_repeat_us": [],
    }
    for r in range(args.runs):
        rounds["in_process_us"].append(per_evaluation_us(inline, args.evaluations, r))
        rounds["sandbox_us"].append(per_evaluation_us(sandbox, args.evaluations, r))
        for name, engine in (("in_process_repeat_us", inline), ("sandbox_repeat_us", sandbox)):
            rounds[name].append(per_evaluation_us(engine, args.evaluations, r, repeat=True))
    loop_s, loop_reason = waited_s(sandbox, "while (true) {}")
    redos_s, redos_reason = waited_s(sandbox, "/(a+)+$/.test('a'.repeat(40) + 'b')")
    sandbox.close()
    result = {
        "started": started,
        "machine": {"cores": os.cpu_count(), "python": platform.python_version()},
        "evaluations_per_round": args.evaluations,
        "runs": args.runs,
        "median_us": {name: round(statistics.median(v), 1) for name, v in rounds.items()},
        "rounds_us": {name: [round(x, 1) for x in v] for name, v in rounds.items()},
        "runaway_waited_s": {
            "infinite_loop": round(loop_s, 3),
            "backtracking_regex": round(redos_s, 3),
        },
        "runaway_reasons": {"infinite_loop": loop_reason, "backtracking_regex": redos_reason},
        "limits": {"time_limit_ms": 100, "grace_s": 2.0},
    }
    OUT.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
