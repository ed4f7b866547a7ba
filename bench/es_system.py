"""es-sched as a system under test for bench/side_by_side.py, on bench/e2e.py's machinery (fresh
topics, the roles in one process, two no-op workers; ``e2e.start_processes``).

Measured on one clock (one machine), without adding work to es-sched's processes:
- completion: the time this process reads a workflow's ``workflow.completed`` event from a
  ``read_committed`` consumer (polled every 5 ms), so it includes the decider's commit and the
  read: a bias against es-sched of a few ms, never in its favour;
- dispatch latency, per task: the CreateTime of the worker's first report of the task minus the
  ``ready`` record's CreateTime (stamped by the decider when it makes the task runnable, as
  Celery's ``before_task_publish``); read after each phase, so the tail costs nothing during it.
  The first report is ``worker.task_started``, stamped just before the handler runs (as
  Celery's ``task_prerun``), or, for a task shorter than ``ES_SCHED_WORKER_STARTED_AFTER_S``
  (ADR 44: its start travels with its outcome), the outcome, stamped once the no-op handler
  returned: later by the handler's run, a bias against es-sched, never in its favour.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import e2e
from confluent_kafka import TopicPartition, libversion, version
from rich.progress import Progress

from es_sched.domain import commands as c
from es_sched.domain.ids import workflow_id_for_command
from es_sched.kafka.clients import consumer, producer
from es_sched.serialization import encode_input
from testkit.runtime import MEDIA, Env
from testkit.settings import BOOTSTRAP, kafka_connection

PARTITIONS = e2e.PARTITIONS
COMPLETED = b'"workflow.completed"'
FIRST_REPORT = (b'"worker.task_started"', b'"worker.task_completed"', b'"worker.task_failed"')


def media_input(dag_id: str) -> dict[str, Any]:
    return {"source_uri": f"file:///{dag_id}.mp4", "asset_id": dag_id, "callback_url": "http://cb"}


class EsSched:
    """One fresh es-sched (topics and processes) that takes DAGs and reports their figures."""

    mode = "es-sched"

    def __init__(
        self,
        logs: Path,
        code: Path = e2e.ROOT,
        partitions: int = PARTITIONS,
        dispatcher_apart: bool = False,
    ) -> None:
        self.logs, self.code = logs, code  # code: the checkout whose es_sched runs
        self.dispatcher_apart = dispatcher_apart  # e2e.start_processes: its own process
        self.env = Env(partitions=partitions, extra={"ES_SCHED_DISPATCH_HEARTBEAT_S": "1"})
        self.done: dict[str, float] = {}  # workflow id -> read time
        self.dag_of: dict[str, str] = {}  # workflow id -> dag id
        self.stop_flag = threading.Event()
        self.offsets: dict[str, dict[int, int]] = {}
        self.ready_pending: dict[str, float] = {}  # task id -> ready CreateTime, not started yet

    def start(self) -> None:
        self.env.create()
        self.env.push_files(*MEDIA)
        self.procs = e2e.start_processes(
            self.env,
            self.logs,
            "side-es",
            branch_1080=True,
            code=self.code,
            dispatcher_apart=self.dispatcher_apart,
        )
        self.out = producer(kafka_connection(BOOTSTRAP))
        self.tail = threading.Thread(target=self._tail, daemon=True)
        self.tail.start()
        self.submit("warm-up")  # as the Celery worker: warm before anything is measured
        self.out.flush(30)
        deadline = time.monotonic() + 120
        while not self.done:
            if time.monotonic() > deadline:
                raise RuntimeError("es-sched did not complete a warm-up workflow")
            time.sleep(0.05)
        self.take_dispatch_ms()  # skip the warm-up's
        self.done.clear()

    def _tail(self) -> None:
        cons = consumer(kafka_connection(BOOTSTRAP), None)
        topic = self.env.topics.events
        cons.assign([TopicPartition(topic, p, 0) for p in range(self.env.partitions)])
        while not self.stop_flag.is_set():
            for msg in cons.consume(1000, 0.005):
                value = msg.value()
                if msg.error() is None and value and COMPLETED in value:
                    self.done.setdefault(json.loads(value)["workflow_id"], time.time())
        cons.close()

    def submit(self, dag_id: str) -> None:
        wid = workflow_id_for_command(f"{self.env.prefix}-{dag_id}")
        self.dag_of[wid] = dag_id
        cmd = c.StartWorkflow(
            f"{self.env.prefix}-{dag_id}", wid, name="media_pipeline", input=media_input(dag_id)
        )
        self.out.produce(self.env.topics.commands, key=wid.encode(), value=encode_input(cmd))
        self.out.poll(0)

    def flush(self) -> None:
        self.out.flush(30)

    def done_count(self) -> int:
        return len(self.done)

    def open_loop(self, rate: float, seconds: float, tag: str, wait_s: float = 120.0) -> int:
        """``rate`` DAGs per second for ``seconds`` (ids ``<tag>-<n>``), then up to ``wait_s``
        for all of them to complete; how many were submitted."""
        n = int(rate * seconds)
        t0 = time.monotonic()
        for i in range(n):
            time.sleep(max(0.0, t0 + i / rate - time.monotonic()))
            self.submit(f"{tag}-{i}")
        self.flush()
        deadline = time.monotonic() + wait_s
        while self.done_count() < n and time.monotonic() < deadline:
            time.sleep(0.02)
        return n

    def completions(self) -> dict[str, float]:
        return {self.dag_of[w]: t for w, t in list(self.done.items()) if w in self.dag_of}

    def _read_new(self, topic: str) -> list[tuple[bytes, float]]:
        """Records of ``topic`` since the last call, with their CreateTime in seconds."""
        cons = consumer(kafka_connection(BOOTSTRAP), None)
        parts = cons.list_topics(topic, timeout=30).topics[topic].partitions
        start = self.offsets.setdefault(topic, dict.fromkeys(parts, 0))
        ends = {p: cons.get_watermark_offsets(TopicPartition(topic, p), 30)[1] for p in parts}
        cons.assign([TopicPartition(topic, p, start[p]) for p in parts if ends[p] > start[p]])
        want = sum(ends[p] - start[p] for p in parts)
        got: list[tuple[bytes, float]] = []
        deadline = time.monotonic() + 60
        # read_committed skips aborted records and markers: stop at the ends' positions
        while want and time.monotonic() < deadline:
            for msg in cons.consume(5000, 0.2):
                if msg.error() is None:
                    got.append((msg.value() or b"", msg.timestamp()[1] / 1000))
            pos = cons.position([TopicPartition(topic, p) for p in parts if ends[p] > start[p]])
            if all(tp.offset >= ends[tp.partition] for tp in pos):
                break
        cons.close()
        self.offsets[topic] = ends
        return got

    def take_dispatch_ms(self) -> list[float]:
        """Dispatch latencies of the tasks first reported since the last call."""
        ready: dict[str, float] = {}
        for value, ts in self._read_new(self.env.topics.ready):
            ready.setdefault(json.loads(value)["task_id"], ts)
        for task, ts in ready.items():
            self.ready_pending.setdefault(task, ts)
        out = []
        for value, ts in self._read_new(self.env.topics.task_results):  # offset order
            if any(kind in value for kind in FIRST_REPORT):
                task = json.loads(value)["task_id"]
                sent = self.ready_pending.pop(task, None)  # the first report counts
                if sent is not None:
                    out.append((ts - sent) * 1000)
        return out

    @staticmethod
    def versions() -> dict[str, str]:
        client = version()  # a str in confluent-kafka 2.16 (a tuple before)
        text = client if isinstance(client, str) else client[0]
        return {"confluent_kafka": text, "librdkafka": libversion()[0]}

    def stop(self) -> None:
        self.stop_flag.set()
        self.tail.join(10)
        e2e.stop_processes(self.env, self.procs)


def run_windows(
    system: EsSched, runs: int, take: Callable[[str], dict[str, Any]]
) -> list[dict[str, Any]]:
    """Start ``system``, take ``runs`` windows one after the other (``take(tag)``, tags
    ``w0``, ``w1``, ...; the completions seen are cleared between them), then stop it."""
    windows = []
    with Progress() as progress:
        bar = progress.add_task("windows", total=runs)
        system.start()
        try:
            for r in range(runs):
                windows.append(take(f"w{r}"))
                system.done.clear()
                progress.advance(bar)
        finally:
            system.stop()
    return windows
