"""Time to recover: kill -9 of the decider, the dispatcher and a worker at half load.

A private single-node Kafka (ports 19150/19151, a temporary state folder, started as
testkit/private_kafka.py does) runs one ``es-sched run --role X`` process per role
(decider, timers, retry relay, dispatcher) and two ``es-sched worker --noop`` workers. A feeder
starts small workflows (task, WAIT 5 s, task, task) at ``--rate`` per second, so a few hundred
are in flight. Each round, on fresh topics and processes, kills in turn:

- the decider (a supervisor restarts it at once, same instance id): first new event = the first
  event produced after the kill visible to a ``read_committed`` reader;
- the dispatcher (restarted at once): first new dispatch = the first assignment record produced
  after the kill, read from the assignments topic;
- one worker (not restarted): first new event = the first of the tasks leased to it that another
  worker completed (its lease expired, the task was leased again at the next epoch);

Each round runs twice, interleaved, on fresh topics: with static group membership off (the old
behaviour: the restarted decider waits for the group to drop the dead member) and on (ADR 21:
``group.instance.id`` = the instance's transactional id, the restarted member takes over at
once); ``--modes`` picks them. The changelog restore is the same in both (one consumer for all
partitions since ADR 21).

"Back to full throughput" = the end of the first one-second bin after the kill (and, for
the decider and dispatcher, after the first new event) in which ``task.completed`` events reach
90 % of the rate of the 10 s before the kill. Times are from the kill, on this host's clock.
The restarted processes' logs give the breakdown, in seconds from the kill: ``started`` (the
role's first log line: Python start), ``assigned`` (partitions assigned by the group) and, for
the decider, ``restored`` (its changelog read and decoded) and ``changelog_restore_s`` (the
decider's own figure: the read alone until 2026-12-06, the read and the states' decoding since).
The workflows the feed started are all
checked completed at the end of a round (``submitted``/``completed``). Figures are medians of
``--rounds`` rounds (default 3); every round and the load average are kept in the JSON.

Needs java and mvn (the local stack's Kafka build), not the shared stack; prints a table, writes
bench/results/current/recovery.json. Rerun: `.venv/bin/python bench/recovery.py [--rounds 3
--rate 80]`
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from recovery_parts import FLOW, TASKDEFS, Tail, feed, log_times, restored_s  # noqa: E402

from es_sched.serialization import wire  # noqa: E402
from testkit.private_kafka import PrivateKafka  # noqa: E402
from testkit.runtime import Env, Role  # noqa: E402

PORT, CONTROLLER_PORT = 19150, 19151
PARTITIONS = 4
FAULTS = ("decider", "dispatcher", "worker")
BASELINE_S, BIN_S, FULL = 10.0, 1.0, 0.9


class Round:
    def __init__(self, broker: PrivateKafka, rate: float, static: bool, max_wait: float) -> None:
        self.env = Env(
            bootstrap=broker.bootstrap,
            partitions=PARTITIONS,
            extra={"ES_SCHED_RUN_STATIC_MEMBERSHIP": str(static).lower()},
        )
        self.env.create()
        self.env.push(FLOW, TASKDEFS)
        self.rate, self.max_wait = rate, max_wait
        self.offered = 3 * rate  # worker tasks per second the feed asks for
        self.procs = {r: Role(self.env, r) for r in ("decider", "timers", "retry", "dispatcher")}
        worker = [
            "worker",
            "--noop",
            "--types",
            "rec.step",
            "--concurrency",
            "64",
            "--cpu",
            "128",
            "--memory-mb",
            "262144",
        ]
        for w in ("w0", "w1"):
            self.procs[w] = Role(self.env, w, [*worker, "--worker-id", w])
        for role in self.procs.values():
            role.wait_log("started", 120)
        topics = self.env.topics
        self.events = Tail(self.env, topics.events, PARTITIONS, json.loads)
        parts = int(self.env.vars["ES_SCHED_DISPATCH_ASSIGNMENT_PARTITIONS"])
        self.assigned = Tail(self.env, topics.assignments, parts, wire.decode)
        self.stop_feed, self.sent = threading.Event(), list[str]()
        self.feeder = threading.Thread(
            target=feed, args=(self.env, rate, self.stop_feed, self.sent), daemon=True
        )
        self.feeder.start()

    def completions(self, since: float, until: float) -> int:
        done = self.events.completed_at
        return bisect.bisect_left(done, until) - bisect.bisect_left(done, since)

    def in_flight(self) -> int:
        kinds = self.events.kinds
        return kinds.get("workflow.started", 0) - kinds.get("workflow.completed", 0)

    def baseline(self, now: float) -> float:
        bins = [
            self.completions(now - BASELINE_S + i, now - BASELINE_S + i + 1)
            for i in range(int(BASELINE_S))
        ]
        return float(statistics.median(bins)) / BIN_S

    def back_to_full(self, kill: float, after: float, until: float) -> float | None:
        """Seconds from the kill to the end of the first bin, ending after ``after``, in which
        task completions reach FULL x the offered load."""
        k = 0
        while kill + (k + 1) * BIN_S <= until:
            start = kill + k * BIN_S
            if start + BIN_S > after and self.completions(start, start + BIN_S) >= (
                FULL * self.offered * BIN_S
            ):
                return start + BIN_S - kill
            k += 1
        return None

    def first_new_event(self, kill: float) -> float | None:
        return min((at for at, ts, _ in self.events.rows if ts > kill), default=None)

    def first_new_dispatch(self, kill: float) -> float | None:
        return min((at for at, ts, _ in self.assigned.rows if ts > kill), default=None)

    def first_relet_completed(self, kill: float, dead: str) -> tuple[float | None, int, float]:
        """The first completion, elsewhere, of a task leased to ``dead``; how many of its tasks
        were leased again; when the last of those completed."""
        held = {a.task_id for _, _, a in self.assigned.rows if a.worker_id == dead}
        relet = {
            a.task_id
            for _, ts, a in self.assigned.rows
            if ts > kill and a.worker_id != dead and a.task_id in held
        }
        done = [
            at
            for at, _, doc in self.events.rows
            if doc["type"] == "task.completed" and doc["payload"]["task_id"] in relet
        ]
        return (min(done) if done else None), len(relet), (max(done) if done else 0.0)

    def first(self, name: str, kill: float) -> tuple[float | None, int, float]:
        if name == "decider":
            return self.first_new_event(kill), 0, 0.0
        if name == "dispatcher":
            return self.first_new_dispatch(kill), 0, 0.0
        return self.first_relet_completed(kill, "w1")

    def fault(self, name: str, console: Console) -> dict[str, Any]:
        before = time.time()
        base, flying, load = self.baseline(before), self.in_flight(), os.getloadavg()
        target = "w1" if name == "worker" else name
        kill = time.time()
        self.procs[target].kill()
        kill_done = time.time()
        if name != "worker":  # a supervisor restarts it at once, with the same settings
            self.procs[name] = Role(self.env, name)
        deadline, caught_up = kill + self.max_wait, None
        while time.time() < deadline:
            time.sleep(0.5)
            first, relet, last_relet = self.first(name, kill)
            if first is not None and caught_up is None and self.in_flight() <= 1.1 * flying:
                caught_up = time.time() - kill  # the backlog the outage left is worked off
            after = kill if name == "worker" else (first or kill)
            full = self.back_to_full(kill, after, time.time() - 1)
            settled = first is not None and full is not None and caught_up is not None
            if settled and (name != "worker" or relet == self._relet_done(kill)):
                break
        first, relet, last_relet = self.first(name, kill)
        after = kill if name == "worker" else (first or kill)
        full = self.back_to_full(kill, after, time.time() - 1)
        bins = [self.completions(kill + i, kill + i + 1) for i in range(int(time.time() - kill))]
        row: dict[str, Any] = {
            "fault": name,
            "workflows_in_flight": flying,
            "task_completions_per_s_before": base,
            "first_new_event_s": round(first - kill, 2) if first else None,
            "back_to_full_throughput_s": round(full, 2) if full is not None else None,
            "backlog_worked_off_s": round(caught_up, 2) if caught_up is not None else None,
            "peak_task_completions_per_s_after": max(bins, default=0),
            "kill_wait_s": round(kill_done - kill, 2),
            "loadavg_at_kill": [round(x, 2) for x in load],
        }
        if name == "worker":
            row["tasks_leased_again"] = relet
            row["last_relet_completed_s"] = round(last_relet - kill, 2) if last_relet else None
        else:
            new = self.procs[name]
            marks = {
                "started": f"{name} .*started",
                "assigned": "assigned (partitions )?\\[",
                "restored": "restored \\d+ partitions",
            }
            t = log_times(new, marks)
            row["log"] = {k: round(v - kill, 2) for k, v in t.items()}
            if name == "decider":
                row["log"]["changelog_restore_s"] = round(restored_s(new), 2)
                dispatched = min(
                    (
                        at
                        for at, ts, doc in self.events.rows
                        if ts > kill and doc["type"] == "task.dispatched"
                    ),
                    default=None,
                )
                row["first_task_dispatched_event_s"] = (
                    round(dispatched - kill, 2) if dispatched else None
                )
        console.print(row)
        return row

    def _relet_done(self, kill: float) -> int:
        """How many of the dead worker's re-leased tasks have completed."""
        held = {a.task_id for _, _, a in self.assigned.rows if a.worker_id == "w1"}
        relet = {
            a.task_id
            for _, ts, a in self.assigned.rows
            if ts > kill and a.worker_id != "w1" and a.task_id in held
        }
        return sum(
            doc["type"] == "task.completed" and doc["payload"]["task_id"] in relet
            for _, ts, doc in self.events.rows
            if ts > kill
        )

    def close(self) -> dict[str, Any]:
        self.stop_feed.set()
        self.feeder.join(30)
        want = set(self.sent)
        deadline = time.time() + 90
        while time.time() < deadline:
            done = {
                doc["workflow_id"]
                for _, _, doc in self.events.rows
                if doc["type"] == "workflow.completed"
            }
            if want <= done:
                break
            time.sleep(1)
        for role in self.procs.values():
            role.stop()
        for tail in (self.events, self.assigned):
            tail.stop.set()
            tail.thread.join(10)
        return {"submitted": len(want), "completed": len(want & done)}


def one_round(
    broker: PrivateKafka, opts: argparse.Namespace, console: Console, static: bool
) -> dict[str, Any]:
    rnd = Round(broker, opts.rate, static, opts.max_wait)
    try:
        time.sleep(opts.warmup)  # the WAIT fills up: rate x 5 s workflows in flight
        faults = []
        for name in opts.faults:
            faults.append(rnd.fault(name, console))
            time.sleep(opts.settle)  # steady again before the next baseline
    finally:
        end = rnd.close()
    return {
        "static_membership": static,
        "faults": faults,
        **end,
        "loadavg_end": [round(x, 2) for x in os.getloadavg()],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rate", type=float, default=40, help="workflows started per second")
    parser.add_argument("--warmup", type=float, default=20)
    parser.add_argument("--settle", type=float, default=12, help="seconds between faults")
    parser.add_argument("--modes", default="off,on", help="static membership, interleaved")
    parser.add_argument("--faults", default=",".join(FAULTS), help="which kills, in order")
    parser.add_argument(
        "--max-wait",
        type=float,
        default=150,
        help="seconds after a kill to wait for recovery (a loaded host may never "
        "work off the backlog: that figure is then null)",
    )
    opts = parser.parse_args()
    opts.faults = [f.strip() for f in opts.faults.split(",")]
    if not set(opts.faults) <= set(FAULTS):
        raise SystemExit(f"--faults: choose from {', '.join(FAULTS)}")
    if shutil.which("java") is None or shutil.which("mvn") is None:
        raise SystemExit("a private broker needs java and mvn (the local stack's Kafka build)")
    console = Console()
    state = Path(tempfile.mkdtemp(prefix="es-sched-recovery-"))
    broker = PrivateKafka(state / "kafka", PORT, CONTROLLER_PORT)
    modes = [m.strip() for m in opts.modes.split(",")]
    rounds: list[dict[str, Any]] = []
    try:
        console.print(f"private broker up in {broker.start():.1f}s at {broker.bootstrap}")
        for i in range(opts.rounds):
            for mode in modes:
                console.print(
                    f"round {i + 1}/{opts.rounds}, static membership {mode}, "
                    f"load average {os.getloadavg()}"
                )
                rounds.append(one_round(broker, opts, console, mode == "on"))
    finally:
        broker.stop()
        shutil.rmtree(state, ignore_errors=True)

    def figures(fault: str, key: str, mode: str) -> list[float | None]:
        chosen = [r for r in rounds if r["static_membership"] == (mode == "on")]
        return [next(f[key] for f in r["faults"] if f["fault"] == fault) for r in chosen]

    def log_figures(fault: str, key: str, mode: str) -> list[float | None]:
        chosen = [r for r in rounds if r["static_membership"] == (mode == "on")]
        return [
            next(f.get("log", {}).get(key) for f in r["faults"] if f["fault"] == fault)
            for r in chosen
        ]

    def median(values: list[float | None]) -> float | None:
        known = [v for v in values if v is not None]
        return round(statistics.median(known), 2) if known else None

    table = Table(
        title=f"es-sched time to recover, median of {opts.rounds} rounds "
        f"({opts.rate:g} workflows/s, private broker)"
    )
    table.add_column("fault (kill -9)")
    table.add_column("static membership")
    table.add_column("first new event (s)", justify="right")
    table.add_column("back to full throughput (s)", justify="right")
    labels = {
        "decider": "decider (restarted) -> first event",
        "dispatcher": "dispatcher (restarted) -> first dispatch",
        "worker": "worker (not restarted) -> its task done elsewhere",
    }
    medians: dict[str, Any] = {}
    for mode in modes:
        medians[mode] = {}
        for fault in opts.faults:
            first = figures(fault, "first_new_event_s", mode)
            full = figures(fault, "back_to_full_throughput_s", mode)
            medians[mode][fault] = {
                "first_new_event_s": median(first),
                "back_to_full_throughput_s": median(full),
            }
            if fault == "decider":  # the restarted decider's timeline, from the kill
                medians[mode][fault]["log"] = {
                    key: median(log_figures(fault, key, mode))
                    for key in ("started", "assigned", "restored", "changelog_restore_s")
                }
            table.add_row(
                labels[fault],
                mode,
                f"{median(first)} ({', '.join(str(v) for v in first)})",
                f"{median(full)} ({', '.join(str(v) for v in full)})",
            )
    console.print(table)
    result = {
        "benchmark": "recovery",
        "machine": {
            "cores": os.cpu_count(),
            "python": platform.python_version(),
            "broker": "private single node (KRaft), 19150/19151",
        },
        "load": {
            "workflows_per_second": opts.rate,
            "definition": FLOW,
            "workers": "2 x noop, concurrency 64",
            "partitions": PARTITIONS,
        },
        "settings": {
            "group_session_timeout_ms": 10_000,
            "group_heartbeat_interval_ms": 2_000,
            "dispatch_heartbeat_s": 5.0,
            "lease_k": 4,
            "suspect_after_s": 15.0,
            "transaction_timeout_ms": 30_000,
            "static_membership": "per round (ES_SCHED_RUN_STATIC_MEMBERSHIP), see per_round",
        },
        "modes": modes,
        "rounds": opts.rounds,
        "median": medians,
        "per_round": rounds,
        "target": {"decider_kill_to_first_dispatch_s": 2.0},
    }
    out = ROOT / "bench" / "results" / "current" / "recovery.json"
    result["not_rerun"] = not_rerun(out, [f for f in FAULTS if f not in opts.faults])
    out.write_text(json.dumps(result, indent=2) + "\n")


def not_rerun(out: Path, faults: list[str]) -> dict[str, Any]:
    """The previous file's medians of the faults this run left out, kept with their date."""
    earlier = json.loads(out.read_text()) if out.exists() and faults else {}
    kept = dict(earlier.get("not_rerun", {}).get("median", {}))
    for fault in faults:
        old = earlier.get("median", {}).get(fault)  # a run before --modes: keyed by fault
        if old is not None:
            kept[fault] = old
    kept = {f: v for f, v in kept.items() if f in faults}
    return {"note": "earlier runs' medians, before ADR 21", "median": kept} if kept else {}


if __name__ == "__main__":
    main()
