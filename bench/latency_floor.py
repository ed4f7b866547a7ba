"""The latency floor: es-sched's hops with nothing in them, beside es-sched, in one run.

Issue 15 asks es-sched to be ahead of Celery + Redis in p95 submit-to-completion latency at
every offered load; at 25 % of the maximum Celery's p95 was 19.6 ms and es-sched's 214
(bench/results/current/side_by_side.json). Each step of the media DAG passes through a Kafka
transaction (the decider's), a ``read_committed`` read of its outputs, the dispatcher's delivery
and a worker's report. This bench builds those hops with no scheduler in them and measures how
long a workflow takes through them alone, so the closing figures can say how much of es-sched's
latency is the transport's and how much is its own.

The floor (three relay processes, Python and confluent-kafka with es-sched's client settings,
``es_sched.kafka.clients``; fresh one-partition topics):
- ``decider``: a ``read_committed`` group consumer of ``inputs`` (first record, then what else
  arrived, up to 500, as the decider reads), one transaction per batch: for each input its
  output record, plus one record each to ``events``, ``changelog`` and ``timers`` (the
  partitions an es-sched decision writes), ``send_offsets_to_transaction``, commit. A start
  makes step 1 ready; a report of step s makes step s+1 ready (step 2 is four records, the
  transcodes; their join waits for all four); after step 6 a ``done`` record.
- ``dispatcher``: reads ``ready`` (``read_committed``), produces a dispatch input to ``inputs``
  and waits for its delivery (the lease journal's grant and the ``DispatchTask``, ADR 50), then
  produces the assignment to ``assignments`` (linger 1 ms, not waited for).
- ``worker``: reads ``assignments``, produces its report (start with outcome, ADR 44) to
  ``inputs`` (linger 1 ms).
Six sequential worker steps, four wide at the second: the 1080p media DAG's critical path
(probe, the transcodes, thumbnail, package, write_asset, notify_done). The floor is a lower
bound: one partition a topic, no decoding beyond a small JSON document, no decisions.

es-sched: the same rate through ``bench/timeline.py``'s system (the roles in one process, two
no-op workers, the media DAG) and its hops from the records' CreateTimes. The hops of both,
each stamped when its record was produced: ``ready -> dispatched`` (the decider's commit and
the dispatcher's read and delivery), ``dispatched -> assigned``, ``assigned -> first report``
(the worker), ``outcome -> event`` (the decider's read and decision), ``workflow`` (submitted to
the last decision's record). The bare floor: the same relays with no producer waiting to fill a
batch (``BARE``). Windows alternate floor, bare floor, es-sched; medians of the windows.

Rerun (needs `es-sched stack up`): `PYTHONPATH=. .venv/bin/python bench/latency_floor.py
[--rate 8 --seconds 15 --runs 3]`; writes bench/results/current/latency_floor.json (or ``--out``).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import orjson
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic
from rich.console import Console
from rich.table import Table

BENCH = Path(__file__).resolve().parent
sys.path[:0] = [str(BENCH), str(BENCH.parent)]
import peer_stats as ps  # noqa: E402
import side_by_side as sbs  # noqa: E402
import timeline  # noqa: E402
from es_system import EsSched  # noqa: E402

from es_sched.kafka.clients import consumer, producer  # noqa: E402
from testkit.settings import (  # noqa: E402
    BOOTSTRAP,
    kafka_connection,
)

TOPICS = ("inputs", "ready", "assignments", "events", "changelog", "timers", "done")
STEPS, WIDE_STEP, WIDTH = 6, 2, 4
# The floor with nothing held back (the "bare floor" windows): no linger and no compression in
# any relay's producer. es-sched's settings let the decider's transactions wait up to 5 ms and
# the reports 1 ms to fill batches (``es_sched.kafka.clients``); this says how low the hops go
# when no producer waits, so the floor is not an artefact of our settings.
BARE = {"linger.ms": 0, "compression.type": "none"}
HOPS = (
    "ready -> dispatched",
    "dispatched -> assigned",
    "assigned -> first report",
    "outcome -> event",
    "workflow",
)


def _batch(c: Consumer) -> list[Any]:
    first = c.poll(0.1)
    if first is None or first.error():
        return []
    return [first, *(m for m in c.consume(499, 0) if not m.error())]


def decider(prefix: str, stop: Any, tuned: dict[str, Any]) -> None:
    """One transaction a batch; the output of each input as module docstring says."""
    t = {k: f"{prefix}-{k}" for k in TOPICS}
    c = consumer(kafka_connection(BOOTSTRAP), f"{prefix}-decider")
    c.subscribe([t["inputs"]])
    p = producer(kafka_connection(BOOTSTRAP), f"{prefix}-decider", **tuned)
    p.init_transactions(30)
    joins: dict[str, int] = {}
    hops: dict[str, list[float]] = {}
    while not stop.is_set():
        batch = _batch(c)
        if not batch:
            continue
        p.begin_transaction()
        for m in batch:
            doc = orjson.loads(m.value())
            wf, kind, step = doc["wf"], doc["kind"], doc.get("step", 0)
            now = time.time()
            for topic in ("events", "changelog", "timers"):
                p.produce(t[topic], m.value(), wf)
            if kind == "dispatch":
                continue
            if kind == "report":
                hops.setdefault(wf, []).append(now - doc["t"])
                if step == WIDE_STEP:
                    joins[wf] = joins.get(wf, 0) + 1
                    if joins[wf] < WIDTH:
                        continue
                    del joins[wf]
            if kind == "report" and step == STEPS:
                done = {"wf": wf, "t0": doc["t0"], "t": now, "events": hops.pop(wf, [])}
                p.produce(t["done"], orjson.dumps(done), wf)
                continue
            nxt = step + 1
            for branch in range(WIDTH if nxt == WIDE_STEP else 1):
                ready = {"wf": wf, "t0": doc["t0"], "step": nxt, "br": branch, "t": now}
                p.produce(t["ready"], orjson.dumps(ready), wf)
        p.send_offsets_to_transaction(c.position(c.assignment()), c.consumer_group_metadata(), 30)
        p.commit_transaction(30)
    c.close()


def dispatcher(prefix: str, stop: Any, tuned: dict[str, Any]) -> None:
    t = {k: f"{prefix}-{k}" for k in TOPICS}
    c = consumer(kafka_connection(BOOTSTRAP), f"{prefix}-dispatcher", **{"fetch.wait.max.ms": 5})
    c.subscribe([t["ready"]])
    p = producer(kafka_connection(BOOTSTRAP), None, **{"linger.ms": 1, **tuned})
    while not stop.is_set():
        batch = _batch(c)
        if not batch:
            continue
        docs = [orjson.loads(m.value()) for m in batch]
        for doc in docs:
            doc["dispatched"] = time.time()
            p.produce(t["inputs"], orjson.dumps({**doc, "kind": "dispatch"}), doc["wf"])
        p.flush(30)  # the grant and the DispatchTask delivered before the assignment leaves
        for doc in docs:
            doc["assigned"] = time.time()
            p.produce(t["assignments"], orjson.dumps(doc), doc["wf"])
        p.poll(0)
    p.flush(30)
    c.close()


def worker(prefix: str, stop: Any, tuned: dict[str, Any]) -> None:
    t = {k: f"{prefix}-{k}" for k in TOPICS}
    c = consumer(kafka_connection(BOOTSTRAP), f"{prefix}-worker")
    c.subscribe([t["assignments"]])
    p = producer(kafka_connection(BOOTSTRAP), None, **{"linger.ms": 1, **tuned})
    while not stop.is_set():
        for m in _batch(c):
            doc = orjson.loads(m.value())
            doc.update(kind="report", reported=time.time())
            doc["t"] = doc["reported"]
            p.produce(t["inputs"], orjson.dumps(doc), doc["wf"])
        p.poll(0)
    p.flush(30)
    c.close()


class Floor:
    """The three relays in their own processes, a source and a sink in this one; ``tuned``
    overrides the relays' producer settings (``BARE``)."""

    def __init__(self, tuned: dict[str, Any] | None = None) -> None:
        self.tuned = tuned or {}
        self.prefix = f"floor-{uuid.uuid4().hex[:10]}"
        self.ctx = mp.get_context("spawn")
        self.stop = self.ctx.Event()
        self.procs: list[Any] = []
        self.done: dict[str, dict[str, Any]] = {}

    def topic(self, name: str) -> str:
        return f"{self.prefix}-{name}"

    def start(self) -> None:
        admin = AdminClient(kafka_connection(BOOTSTRAP).config())
        new = [NewTopic(self.topic(k), 1, 1) for k in TOPICS]
        for f in admin.create_topics(new).values():
            f.result(30)
        for role in (decider, dispatcher, worker):
            proc = self.ctx.Process(target=role, args=(self.prefix, self.stop, self.tuned))
            proc.start()
            self.procs.append(proc)
        self.sink = consumer(kafka_connection(BOOTSTRAP), None, **{"fetch.wait.max.ms": 5})
        self.sink.assign([_tp(self.topic("done"))])
        self.taps = {
            k: consumer(kafka_connection(BOOTSTRAP), None) for k in ("assignments", "inputs")
        }
        for k, c in self.taps.items():
            c.assign([_tp(self.topic(k))])
        self.source = producer(kafka_connection(BOOTSTRAP), None, **{"linger.ms": 1})
        self._run(1.0, 10.0, "warm")  # the relays' groups join and their first fetches settle

    def window(self, rate: float, seconds: float, tag: str) -> dict[str, Any]:
        n, found = self._run(rate, seconds, tag)
        return {
            "workflows": n,
            "completed": len(found),
            "hops": {h: ps.latency_summary(found_h) for h, found_h in self._hops(found).items()},
        }

    def _run(self, rate: float, seconds: float, tag: str) -> tuple[int, dict[str, Any]]:
        ids = []
        start = time.monotonic()
        n = max(1, int(rate * seconds))
        for i in range(n):
            while time.monotonic() < start + i / rate:
                time.sleep(0.001)
            wf = f"{tag}-{i}"
            ids.append(wf)
            now = time.time()
            self.source.produce(
                self.topic("inputs"),
                orjson.dumps({"wf": wf, "kind": "start", "t0": now, "t": now}),
                wf,
            )
            self.source.poll(0)
        self.source.flush(30)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not all(w in self.done for w in ids):
            for m in self.sink.consume(100, 0.05):
                value = m.value()
                if not m.error() and value is not None:
                    doc = orjson.loads(value)
                    self.done[doc["wf"]] = doc
        return n, {w: self.done[w] for w in ids if w in self.done}

    def _hops(self, found: dict[str, Any]) -> dict[str, list[float]]:
        """Hops of the window's workflows: the relays stamped each record when producing it,
        the stamps travel in the records (one clock: one machine)."""
        out: dict[str, list[float]] = {h: [] for h in HOPS}
        wanted = set(found)
        for m in _drain(self.taps["assignments"]):
            doc = orjson.loads(m.value())
            if doc["wf"] in wanted:
                out["ready -> dispatched"].append(doc["dispatched"] - doc["t"])
                out["dispatched -> assigned"].append(doc["assigned"] - doc["dispatched"])
        for m in _drain(self.taps["inputs"]):
            doc = orjson.loads(m.value())
            if doc["wf"] in wanted and doc["kind"] == "report":
                out["assigned -> first report"].append(doc["reported"] - doc["assigned"])
        for doc in found.values():
            out["outcome -> event"] += doc["events"]
            out["workflow"].append(doc["t"] - doc["t0"])
        return {h: [v * 1000 for v in vs] for h, vs in out.items()}

    def close(self) -> None:
        self.stop.set()
        for proc in self.procs:
            proc.join(30)
        for c in (self.sink, *self.taps.values()):
            c.close()
        admin = AdminClient(kafka_connection(BOOTSTRAP).config())
        for f in admin.delete_topics([self.topic(k) for k in TOPICS]).values():
            f.result(30)


def _drain(c: Consumer) -> list[Any]:
    """Every record up to the end the reader finds (a read that comes back empty)."""
    out: list[Any] = []
    while batch := c.consume(10_000, 1.0):
        out += (m for m in batch if not m.error())
    return out


def _tp(topic: str) -> TopicPartition:
    return TopicPartition(topic, 0, 0)


def es_window(system: EsSched, rate: float, seconds: float, tag: str) -> dict[str, Any]:
    found = timeline.window(system, rate, seconds, tag)
    return {**found, "hops": {h: found["hops"][h] for h in HOPS}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rate", type=float, default=8.0, help="DAGs per second, open loop")
    ap.add_argument("--seconds", type=float, default=15.0)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument(
        "--out", type=Path, default=BENCH / "results" / "current" / "latency_floor.json"
    )
    opts = ap.parse_args()
    floors = {"floor": Floor(), "bare floor": Floor(BARE)}
    system = EsSched(Path(tempfile.mkdtemp(prefix="floor-")))
    windows: dict[str, list[dict[str, Any]]] = {name: [] for name in (*floors, "es-sched")}
    for floor in floors.values():
        floor.start()
    system.start()
    try:
        system.open_loop(opts.rate, 5.0, "warm")  # as bench/timeline.py: the first seconds
        system.done.clear()
        for r in range(opts.runs):
            for name, floor in floors.items():
                windows[name].append(floor.window(opts.rate, opts.seconds, f"w{r}"))
            windows["es-sched"].append(es_window(system, opts.rate, opts.seconds, f"w{r}"))
            system.done.clear()
            print(f"round {r + 1}/{opts.runs} done", flush=True)
    finally:
        system.stop()
        for floor in floors.values():
            floor.close()
    medians = {
        name: {
            h: {
                q: statistics.median(w["hops"][h][q] or 0.0 for w in ws)
                for q in ("p50", "p95", "p99")
            }
            for h in HOPS
        }
        for name, ws in windows.items()
    }
    table = Table(title=f"hops at {opts.rate:g} DAGs/s, medians of {opts.runs} windows (ms)")
    table.add_column("hop")
    for name in windows:
        for q in ("p50", "p95"):
            table.add_column(f"{name} {q}", justify="right")
    for h in HOPS:
        cells = (f"{medians[name][h][q]:.1f}" for name in windows for q in ("p50", "p95"))
        table.add_row(h, *cells)
    Console().print(table)
    result = {
        "benchmark": "latency_floor",
        "command": " ".join(sys.argv),
        "machine": sbs.fingerprint(),
        "rate": opts.rate,
        "seconds": opts.seconds,
        "steps": STEPS,
        "wide_step": WIDE_STEP,
        "width": WIDTH,
        "medians": medians,
        "windows": windows,
    }
    ps.write_result(opts.out, result)


if __name__ == "__main__":
    main()
