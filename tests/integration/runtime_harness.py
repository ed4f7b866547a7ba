"""Real-Kafka harness for the runtime tests: a private topic prefix, role processes, a scripted
worker that answers the ready queue, and read-backs of the events topic."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, TopicPartition

from es_sched.domain import commands as c
from es_sched.domain.events import Event
from es_sched.domain.ids import workflow_id_for_command
from es_sched.kafka.clients import consumer, producer
from es_sched.kafka.registry import taskdef_key, workflow_key
from es_sched.kafka.topics import Topics, ensure_topics
from es_sched.serialization import decode_event, encode_input

ROOT = Path(__file__).resolve().parents[2]
BOOTSTRAP = os.environ.get("ES_SCHED_KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")


def load_json(rel: str) -> Any:
    return json.loads((ROOT / rel).read_text())


@dataclass
class Env:
    prefix: str = field(default_factory=lambda: f"t{uuid.uuid4().hex[:10]}")
    partitions: int = 4
    extra: dict[str, str] = field(default_factory=dict)
    bootstrap: str = BOOTSTRAP  # another broker for tests that run a private one

    @property
    def vars(self) -> dict[str, str]:
        return {
            "ES_SCHED_KAFKA_TOPIC_PREFIX": self.prefix,
            "ES_SCHED_KAFKA_PARTITIONS": str(self.partitions),
            "ES_SCHED_DISPATCH_ASSIGNMENT_PARTITIONS": "4",
            "ES_SCHED_KAFKA_BOOTSTRAP_SERVERS": self.bootstrap,
            **self.extra,
        }

    @property
    def topics(self) -> Topics:
        return Topics(self.prefix, self.partitions, assignment_partitions=4)

    def create(self) -> None:
        ensure_topics(self.bootstrap, self.topics)

    def push(self, definition: dict[str, Any], taskdefs: list[dict[str, Any]]) -> None:
        p = producer(self.bootstrap)
        key = workflow_key(definition["name"], definition.get("version", 1))
        p.produce(self.topics.definitions, key=key, value=json.dumps(definition).encode())
        for td in taskdefs:
            p.produce(
                self.topics.definitions, key=taskdef_key(td["name"]), value=json.dumps(td).encode()
            )
        assert p.flush(30) == 0

    def send(self, inputs: Sequence[c.Input], topic: str | None = None) -> None:
        p = producer(self.bootstrap)
        for inp in inputs:
            p.produce(
                topic or self.topics.commands, key=inp.workflow_id.encode(), value=encode_input(inp)
            )
            p.poll(0)
        assert p.flush(60) == 0

    def start_commands(self, name: str, inputs: list[dict[str, Any]]) -> list[c.StartWorkflow]:
        out = []
        for i, inp in enumerate(inputs):
            cid = f"cmd-{self.prefix}-{i}"
            out.append(c.StartWorkflow(cid, workflow_id_for_command(cid), name=name, input=inp))
        return out


class Role:
    """``es-sched run --role ROLE`` as a child process with this env (``module``: another
    entry point, e.g. ``tests.integration.faulty_role``, with ``argv`` as its arguments)."""

    def __init__(
        self,
        env: Env,
        role: str,
        argv: Sequence[str] = (),
        module: str = "es_sched",
        **extra_env: str,
    ) -> None:
        logs = Path(tempfile.gettempdir()) / "es-sched-test-roles"
        logs.mkdir(exist_ok=True)
        self.log = logs / f"{env.prefix}-{role}-{uuid.uuid4().hex[:6]}.log"
        command = list(argv) or ["run", "--role", role]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", module, *command],
            env={**os.environ, **env.vars, **extra_env},
            stdout=self.log.open("w"),
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )

    def wait_log(self, text: str, timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if text in self.log.read_text(errors="replace"):
                return
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"role exited {self.proc.returncode}:\n{self.log.read_text()[-3000:]}"
                )
            time.sleep(0.1)
        raise AssertionError(
            f"no {text!r} in {self.log} after {timeout_s}s:\n{self.log.read_text()[-3000:]}"
        )

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.kill()


Policy = Callable[[dict[str, Any]], tuple[str, dict[str, Any]]]
"""ready record -> ("COMPLETED" | "FAILED", output)."""


def complete_all(task: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    if task["name"] == "media.probe":
        return "COMPLETED", {"height": 1080, "duration": 4.0}
    return "COMPLETED", {"ok": task["ref"]}


class Worker:
    """Plays every worker: reads the ready queue and reports to task-results."""

    def __init__(self, env: Env, policy: Policy = complete_all) -> None:
        self.env, self.policy = env, policy
        self.stop = threading.Event()
        self.executions: list[tuple[str, int, str]] = []  # (task_id, attempt, status)
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Worker:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(30)

    def _run(self) -> None:
        # At-least-once like a real worker; auto-commit is enough for a test double.
        cons = consumer(
            self.env.bootstrap,
            f"{self.env.prefix}-worker",
            **{"enable.auto.commit": True, "enable.auto.offset.store": True},
        )
        cons.subscribe([self.env.topics.ready])
        prod = producer(self.env.bootstrap)
        try:
            while not self.stop.is_set():
                for msg in cons.consume(500, 0.2):
                    if msg.error() is not None:
                        continue
                    task = json.loads(msg.value() or b"{}")
                    status, output = self.policy(task)
                    base = dict(workflow_id=task["workflow_id"], task_id=task["task_id"],
                                attempt=task["attempt"], worker_id="test-worker")  # fmt: skip
                    report: c.Input
                    rid = f"report:{task['task_id']}:{task['attempt']}"
                    if status == "COMPLETED":
                        report = c.ReportCompleted(rid, output=output, **base)
                    else:
                        report = c.ReportFailed(
                            rid, reason=f"scripted failure of {task['ref']}", **base
                        )
                    self.executions.append((task["task_id"], task["attempt"], status))
                    prod.produce(self.env.topics.task_results, key=task["workflow_id"].encode(),
                                 value=encode_input(report))  # fmt: skip
                    prod.poll(0)
                prod.flush(10)
        finally:
            prod.flush(30)
            cons.close()


def read_events(env: Env, isolation: str = "read_committed") -> dict[str, list[Event]]:
    """Every event of the events topic, by workflow, in offset order."""
    extra = {"isolation.level": isolation, "enable.partition.eof": True}
    cons = consumer(env.bootstrap, None, **extra)
    parts = [TopicPartition(env.topics.events, p, 0) for p in range(env.partitions)]
    cons.assign(parts)
    by_wf: dict[str, list[Event]] = defaultdict(list)
    eof: set[int] = set()
    deadline = time.monotonic() + 60
    while len(eof) < env.partitions and time.monotonic() < deadline:
        for msg in cons.consume(1000, 0.5):
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    eof.add(msg.partition() or 0)
                continue
            event = decode_event(msg.value() or b"")
            by_wf[event.workflow_id].append(event)
    cons.close()
    return dict(by_wf)


def count_records(env: Env, topic: str, isolation: str) -> int:
    extra = {"isolation.level": isolation, "enable.partition.eof": True}
    cons = consumer(env.bootstrap, None, **extra)
    n = env.partitions if topic != env.topics.definitions else 1
    cons.assign([TopicPartition(topic, p, 0) for p in range(n)])
    count, eof = 0, set[int]()
    deadline = time.monotonic() + 60
    while len(eof) < n and time.monotonic() < deadline:
        for msg in cons.consume(1000, 0.5):
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    eof.add(msg.partition() or 0)
                continue
            count += 1
    cons.close()
    return count


def final_status(events: list[Event]) -> str:
    for event in reversed(events):
        if event.type == "workflow.completed":
            return "COMPLETED"
        if event.type == "workflow.ended":
            return str(event.payload.status)  # type: ignore[attr-defined]
    return "RUNNING"


def wait_until(check: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


@contextmanager
def roles(env: Env, *names: str, **extra_env: str) -> Iterator[list[Role]]:
    started = [Role(env, n, **extra_env) for n in names]
    try:
        for r in started:
            r.wait_log("started")
        yield started
    finally:
        for r in started:
            r.stop()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        return str(resp.read().decode())


def metric(text: str, name: str, **labels: str) -> float | None:
    """The sum of every sample of ``name`` whose labels include ``labels``; None if none."""
    total, found = 0.0, False
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        series, value = line.rsplit(" ", 1)
        base, _, rest = series.partition("{")
        have = dict(re.findall(r'(\w+)="([^"]*)"', rest))
        if base == name and all(have.get(k) == v for k, v in labels.items()):
            total, found = total + float(value), True
    return total if found else None
