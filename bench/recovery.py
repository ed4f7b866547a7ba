"""Time to recover: kill -9 of the decider, the dispatcher, a worker and the broker, and a
second decider paused in a transaction, at half load.

A private single-node Kafka (ports 19150/19151, a temporary state folder, started as
testkit/private_kafka.py does) runs one ``es-sched run --role X`` process per role
(decider, timers, retry relay, dispatcher) and two ``es-sched worker --noop --noop-s 0.2``
workers (each task held 0.2 s, so a worker holds leases when it dies). A feeder
starts small workflows (task, WAIT 5 s, task, task) at ``--rate`` per second, so a few hundred
are in flight. Each round, on fresh topics and processes, kills in turn:

- the decider (a supervisor restarts it at once, same instance id): first new event = the first
  event produced after the kill visible to a ``read_committed`` reader;
- the dispatcher (restarted at once): first new dispatch = the first assignment record produced
  after the kill, read from the assignments topic;
- one worker (not restarted): first new event = the first of the tasks leased to it that another
  worker completed (its lease expired, the task was leased again at the next epoch);
- a second decider (instance ``b``, ``testkit/faulty_role`` so that it can be stopped
  inside an open transaction with its records flushed): SIGSTOP there, SIGCONT once the first
  decider wrote on each of its partitions. First new event = the first event on one of its
  partitions; also the last of them (``all_its_partitions_back_s``) and the longest pause of
  events on the first decider's own partitions (``own_partitions_longest_pause_s``: a successor
  reading committed offsets waits for the stopped one's transaction, KIP-447). It publishes its
  liveness record (``--roster``), as ``es-sched run`` does: the first decider ends its open
  transaction by it (ADR 79);
- the broker (kill -9, restarted on the same data ``BROKER_DOWN_S`` later): from the broker
  answering again (``PrivateKafka.start``) to the first event and the first dispatch created
  after it; also when the broker served a produce and both groups' coordinators
  (``broker_serving_s``).

Each round runs once per mode, interleaved, on fresh topics; a mode is a set of settings
(``MODES``): ``off`` is static group membership off (before ADR 21: the restarted decider waits
for the group to drop the dead member), ``earlier`` the defaults before issue 52 (static
membership on for the transactional roles, leases of 4 heartbeats, the dispatcher a dynamic
member, no successor ending a stopped decider's transaction), ``now`` today's defaults,
``txn10`` 10 s transactions (measured, not kept: ADR 78); ``--modes`` picks them.

"Back to full throughput" = the end of the first one-second bin after the kill (and, for
the decider and dispatcher, after the first new event) in which ``task.completed`` events reach
90 % of the rate of the 10 s before the kill. Times are from the kill, on this host's clock.
The restarted processes' logs give the breakdown, in seconds from the kill: ``started`` (the
role's first log line: Python start), ``assigned`` (partitions assigned by the group) and, for
the decider, ``restored`` (its changelog read and decoded) and ``changelog_restore_s`` (the
decider's own figure: the read alone until 2026-12-06, the read and the states' decoding since).
The workflows the feed started are all
checked completed at the end of a round (``submitted``/``completed``). Figures are medians of
``--rounds`` rounds (default 3); every round and the load average are kept in the JSON. A run
of some ``--faults`` keeps the previous file's medians of the others.

Needs java and mvn (the local stack's Kafka build), not the shared stack; prints a table, writes
bench/results/current/recovery.json. Rerun: `.venv/bin/python bench/recovery.py [--rounds 3
--rate 80]`
"""

from __future__ import annotations

import argparse
import bisect
import itertools
import json
import os
import platform
import re
import shutil
import signal
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
from confluent_kafka import KafkaException, Producer  # noqa: E402
from confluent_kafka.admin import AdminClient  # noqa: E402
from recovery_parts import (  # noqa: E402
    FLOW,
    TASKDEFS,
    Tail,
    feed,
    log_times,
    restored_records,
    restored_s,
)

from es_sched.kafka.topics import ensure_topic  # noqa: E402
from es_sched.serialization import wire  # noqa: E402
from testkit.faulty_role import MODULE as FAULTY  # noqa: E402
from testkit.private_kafka import PrivateKafka  # noqa: E402
from testkit.runtime import Env, Role  # noqa: E402
from testkit.settings import kafka_connection  # noqa: E402

PORT, CONTROLLER_PORT = 19150, 19151
PARTITIONS = 4
FAULTS = ("decider", "dispatcher", "worker", "paused", "broker")
BROKER_DOWN_S = 20.0
# The broker fault's probes, made once and kept for the process's life (see broker_serving).
_CONN = kafka_connection(f"127.0.0.1:{PORT}")
PROBE = Producer({**_CONN.config(), "acks": "all", "message.timeout.ms": 5000})
ADMIN = AdminClient(
    _CONN.config()
)  # issue 52's probe: the single broker killed and restarted 20 s later
BASELINE_S, BIN_S, FULL = 10.0, 1.0, 0.9
EXTRA = {  # figures of a fault besides its first new event, their medians kept too
    "worker": ("first_leased_again_s",),
    "paused": ("all_its_partitions_back_s", "own_partitions_longest_pause_s"),
    "broker": ("first_new_dispatch_s", "broker_serving_s", "first_dispatch_after_serving_s"),
}


def last_assigned(log: str) -> set[int]:
    """The partitions a decider's log says it was assigned last."""
    found = re.findall(r"assigned partitions \[([\d, ]*)\]", log)
    return {int(n) for n in found[-1].split(",") if n.strip()} if found else set()


MODES: dict[str, dict[str, str]] = {
    "off": {"ES_SCHED_RUN_STATIC_MEMBERSHIP": "false"},
    "earlier": {  # the defaults before issue 52 (ADR 78, 79)
        "ES_SCHED_DISPATCH_LEASE_K": "4",
        "ES_SCHED_DISPATCH_STATIC_MEMBERSHIP": "false",
        "ES_SCHED_RUN_END_ORPHANED_TRANSACTIONS": "false",
    },
    "txn10": {"ES_SCHED_RUN_TRANSACTION_TIMEOUT_MS": "10000"},  # tried, not kept (ADR 78)
    "now": {},
}


class Round:
    def __init__(
        self, broker: PrivateKafka, rate: float, mode: str, max_wait: float, faults: list[str]
    ) -> None:
        # spread: both workers hold leases (binpack fills one first, and the one killed may
        # hold none)
        extra = {"ES_SCHED_DISPATCH_POLICY": "spread", **MODES[mode]}
        self.env = Env(bootstrap=broker.bootstrap, partitions=PARTITIONS, extra=extra)
        self.env.create()
        self.env.push(FLOW, TASKDEFS)
        self.broker = broker
        if "broker" in faults:  # what broker_serving produces to
            ensure_topic(kafka_connection(broker.bootstrap), f"{self.env.prefix}.probe", 1)
        self.rate, self.max_wait = rate, max_wait
        self.held: set[int] = set()  # the killed decider's partitions
        self.offered = 3 * rate  # worker tasks per second the feed asks for
        self.procs = {r: Role(self.env, r) for r in ("decider", "timers", "retry", "dispatcher")}
        worker = [
            "worker",
            "--noop",
            "--types",
            "rec.step",
            "--concurrency",
            "64",
            "--noop-s",  # a worker holds about rate x 3 x 0.2 / 2 leases when it is killed
            "0.2",
            "--cpu",
            "128",
            "--memory-mb",
            "262144",
        ]
        for w in ("w0", "w1"):
            self.procs[w] = Role(self.env, w, [*worker, "--worker-id", w])
        self.pause_file = Path(tempfile.mkdtemp(prefix="es-sched-recovery-pause-")) / "now"
        if "paused" in faults:  # a second decider, of another instance, to be paused
            # testkit/faulty_role: it pauses inside its next transaction once the
            # file exists, and this SIGSTOPs it there (issue 52's worst case)
            second = ["--role", "decider", "--pause-when", str(self.pause_file), "--pause-s", "1"]
            second.append("--roster")  # its liveness record, as es-sched run publishes
            self.procs["decider-b"] = Role(
                self.env, "decider-b", second, module=FAULTY, ES_SCHED_RUN_INSTANCE="b"
            )
        for name, role in self.procs.items():
            role.wait_log("started" if name != "decider-b" else "assigned partitions [", 120)
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

    def first_new_event(self, kill: float, partitions: set[int]) -> float | None:
        """The first event created after ``kill`` on these partitions (the killed decider's:
        with a second decider running, the others never stop)."""
        rows = zip(self.events.rows, self.events.partitions, strict=False)
        return min((at for (at, ts, _), p in rows if ts > kill and p in partitions), default=None)

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
            return self.first_new_event(kill, self.held), 0, 0.0
        if name == "dispatcher":
            return self.first_new_dispatch(kill), 0, 0.0
        return self.first_relet_completed(kill, "w1")

    def fault(self, name: str, console: Console) -> dict[str, Any]:
        before = time.time()
        base, flying, load = self.baseline(before), self.in_flight(), os.getloadavg()
        target = "w1" if name == "worker" else name
        self.held = last_assigned(self.procs["decider"].text()) or set(range(PARTITIONS))
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
            row["first_leased_again_s"] = self._first_relet(kill)
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
                row["changelog_records_restored"] = restored_records(new)
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

    def paused(self, console: Console) -> dict[str, Any]:
        """SIGSTOP of the second decider, in whatever transaction it has open, then SIGCONT
        once the first took its partitions over: from the stop to the first event on each of
        its partitions, and the longest pause of events on the first decider's own ones (a
        successor reading committed offsets waits for the stopped one's open transaction)."""
        b = self.procs["decider-b"]
        held = last_assigned(b.text())
        own = set(range(PARTITIONS)) - held
        base, flying, load = self.baseline(time.time()), self.in_flight(), os.getloadavg()
        self.pause_file.touch()
        b.wait_log("fault: transaction open with records flushed", 60)
        b.proc.send_signal(signal.SIGSTOP)
        stop = time.time()
        firsts: dict[int, float] = {}
        while time.time() < stop + self.max_wait and len(firsts) < len(held):
            time.sleep(0.5)
            for (at, ts, _), part in zip(self.events.rows, self.events.partitions, strict=False):
                if ts > stop and part in held and part not in firsts:
                    firsts[part] = at
        end = max(firsts.values(), default=time.time())
        own_arrivals = [stop] + [
            at
            for (at, _, _), part in zip(self.events.rows, self.events.partitions, strict=False)
            if part in own and stop < at <= end
        ]
        gaps = [later - earlier for earlier, later in itertools.pairwise(own_arrivals)]
        b.proc.send_signal(signal.SIGCONT)
        first = min(firsts.values(), default=None)
        full = self.back_to_full(stop, first or stop, time.time() - 1)
        row: dict[str, Any] = {
            "fault": "paused",
            "workflows_in_flight": flying,
            "task_completions_per_s_before": base,
            "partitions_of_the_paused": sorted(held),
            "first_new_event_s": round(first - stop, 2) if first else None,
            "all_its_partitions_back_s": round(end - stop, 2) if firsts else None,
            "own_partitions_longest_pause_s": round(max(gaps, default=end - stop), 2),
            "back_to_full_throughput_s": round(full, 2) if full is not None else None,
            "loadavg_at_kill": [round(x, 2) for x in load],
        }
        console.print(row)
        return row

    def broker_restart(self, console: Console) -> dict[str, Any]:
        """kill -9 of the broker, restarted on the same data BROKER_DOWN_S later: from the
        broker being ready again (``PrivateKafka.start`` returned: it answers a metadata
        request) to the first event and the first dispatch created after that moment."""
        base, flying, load = self.baseline(time.time()), self.in_flight(), os.getloadavg()
        pid = self.broker.kill()
        time.sleep(BROKER_DOWN_S)  # the fault's length, not a wait for something to happen
        self.broker.start()
        ready = time.time()
        serving = self.broker_serving(ready + self.max_wait)
        deadline, first, dispatch = ready + self.max_wait, None, None
        while time.time() < deadline and (first is None or dispatch is None):
            time.sleep(0.5)
            first = min((at for at, ts, _ in self.events.rows if ts > ready), default=None)
            dispatch = self.first_new_dispatch(ready)
        full = self.back_to_full(ready, dispatch or ready, time.time() - 1)
        row: dict[str, Any] = {
            "fault": "broker",
            "workflows_in_flight": flying,
            "task_completions_per_s_before": base,
            "proof": f"broker pid {pid} killed, down {BROKER_DOWN_S:.0f}s",
            "first_new_event_s": round(first - ready, 2) if first else None,
            "first_new_dispatch_s": round(dispatch - ready, 2) if dispatch else None,
            "broker_serving_s": round(serving - ready, 2),
            "first_dispatch_after_serving_s": round(dispatch - serving, 2) if dispatch else None,
            "back_to_full_throughput_s": round(full, 2) if full is not None else None,
            "loadavg_at_kill": [round(x, 2) for x in load],
        }
        console.print(row)
        return row

    def broker_serving(self, deadline: float) -> float:
        """When the restarted broker serves what the roles need, not just metadata: a record
        delivered (acks=all) to a probe topic, and the dispatcher's and decider's group
        coordinators answering (loaded from ``__consumer_offsets`` after log recovery)."""
        groups = [f"{self.env.prefix}-dispatcher", f"{self.env.prefix}-decider"]
        delivered: list[bool] = []
        while time.time() < deadline:
            PROBE.produce(
                f"{self.env.prefix}.probe",
                b"x",
                on_delivery=lambda e, _m: delivered.append(e is None),
            )
            PROBE.flush(10)
            # Each answer awaited whole (an admin client destroyed with requests in flight
            # trips librdkafka's rd_kafka_enq_once assertion, and the process aborts).
            answers = ADMIN.describe_consumer_groups(groups, request_timeout=5)
            loaded = True
            for future in answers.values():
                try:
                    future.result()
                except KafkaException:
                    loaded = False
            if delivered and delivered[-1] and loaded:
                return time.time()
            time.sleep(0.2)
        return time.time()

    def _first_relet(self, kill: float) -> float | None:
        """Seconds from the kill to the first lease of a dead worker's task to another: the
        task back from the queue (its completion adds the task's run)."""
        held = {a.task_id for _, _, a in self.assigned.rows if a.worker_id == "w1"}
        again = [
            at
            for at, ts, a in self.assigned.rows
            if ts > kill and a.worker_id != "w1" and a.task_id in held
        ]
        return round(min(again) - kill, 2) if again else None

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
        shutil.rmtree(self.pause_file.parent, ignore_errors=True)
        for tail in (self.events, self.assigned):
            tail.stop.set()
            tail.thread.join(10)
        return {"submitted": len(want), "completed": len(want & done)}


def one_round(
    broker: PrivateKafka, opts: argparse.Namespace, console: Console, mode: str
) -> dict[str, Any]:
    rnd = Round(broker, opts.rate, mode, opts.max_wait, opts.faults)
    try:
        time.sleep(opts.warmup)  # the WAIT fills up: rate x 5 s workflows in flight
        faults = []
        for name in opts.faults:
            if name == "paused":
                faults.append(rnd.paused(console))
            elif name == "broker":
                faults.append(rnd.broker_restart(console))
            else:
                faults.append(rnd.fault(name, console))
            time.sleep(opts.settle)  # steady again before the next baseline
    finally:
        end = rnd.close()
    return {
        "mode": mode,
        "settings": MODES[mode],
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
    parser.add_argument("--modes", default="earlier,now", help="MODES to run, interleaved")
    parser.add_argument("--faults", default=",".join(FAULTS), help="which kills, in order")
    parser.add_argument("--note", default="", help="kept in the JSON, e.g. what changed")
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
    if not set(modes) <= set(MODES):
        raise SystemExit(f"--modes: choose from {', '.join(MODES)}")
    rounds: list[dict[str, Any]] = []
    try:
        console.print(f"private broker up in {broker.start():.1f}s at {broker.bootstrap}")
        for i in range(opts.rounds):
            for mode in modes:
                console.print(
                    f"round {i + 1}/{opts.rounds}, mode {mode} {MODES[mode]}, "
                    f"load average {os.getloadavg()}"
                )
                rounds.append(one_round(broker, opts, console, mode))
    finally:
        broker.stop()
        shutil.rmtree(state, ignore_errors=True)

    def figures(fault: str, key: str, mode: str) -> list[float | None]:
        chosen = [r for r in rounds if r["mode"] == mode]
        return [next(f[key] for f in r["faults"] if f["fault"] == fault) for r in chosen]

    def log_figures(fault: str, key: str, mode: str) -> list[float | None]:
        chosen = [r for r in rounds if r["mode"] == mode]
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
    table.add_column("mode")
    table.add_column("first new event (s)", justify="right")
    table.add_column("back to full throughput (s)", justify="right")
    labels = {
        "decider": "decider (restarted) -> first event",
        "dispatcher": "dispatcher (restarted) -> first dispatch",
        "worker": "worker (not restarted) -> its task done elsewhere",
        "paused": "second decider SIGSTOPped in a transaction -> first event on its partitions",
        "broker": f"broker (restarted {BROKER_DOWN_S:.0f} s later) -> first event, from ready",
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
            for key in EXTRA.get(fault, ()):
                medians[mode][fault][key] = median(
                    [
                        next(f.get(key) for f in r["faults"] if f["fault"] == fault)
                        for r in rounds
                        if r["mode"] == mode
                    ]
                )
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
            "workers": "2 x noop holding each task 0.2 s, concurrency 64, placement spread",
            "partitions": PARTITIONS,
        },
        "settings": {
            "group_session_timeout_ms": 10_000,
            "group_heartbeat_interval_ms": 2_000,
            "dispatch_heartbeat_s": 5.0,
            "suspect_after_s": 15.0,
            "modes": {m: MODES[m] or "the defaults" for m in modes},
        },
        "modes": modes,
        "rounds": opts.rounds,
        "median": medians,
        "per_round": rounds,
        "target": {"decider_kill_to_first_dispatch_s": 2.0},
        "note": opts.note,
    }
    out = ROOT / "bench" / "results" / "current" / "recovery.json"
    kept_from_previous_run(out, result, modes, opts.faults)
    out.write_text(json.dumps(result, indent=2) + "\n")


def kept_from_previous_run(
    out: Path, result: dict[str, Any], modes: list[str], faults: list[str]
) -> None:
    """A run of some faults keeps the previous file's medians of the others (same modes), and
    its rounds, so one fault can be measured again without the rest."""
    if not out.exists():
        return
    earlier = json.loads(out.read_text())
    kept: set[str] = set()
    for mode in modes:
        for fault, figures in earlier.get("median", {}).get(mode, {}).items():
            if fault not in faults:
                result["median"][mode][fault] = figures
                kept.add(fault)
    result["kept_from_previous_run"] = {"faults": sorted(kept), "load": earlier.get("load")}
    result["per_round_of_previous_run"] = [
        r for r in earlier.get("per_round", []) if r.get("mode") in modes
    ]


if __name__ == "__main__":
    main()
