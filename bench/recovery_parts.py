"""bench/recovery.py's parts: the workflow it feeds, the feeder, a topic tail with arrival
times, and the restarted roles' own log figures (split from it to keep each under ~400 lines).
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from confluent_kafka import TopicPartition

from es_sched.domain import commands as c
from es_sched.domain.ids import workflow_id_for_command
from es_sched.kafka.clients import consumer, producer
from es_sched.serialization import encode_input
from testkit.runtime import Env, Role
from testkit.settings import kafka_connection

FLOW = {
    "name": "recovery_flow",
    "version": 1,
    "tasks": [
        {"name": "rec.step", "taskReferenceName": "a"},
        {
            "name": "pause",
            "taskReferenceName": "pause",
            "type": "WAIT",
            "inputParameters": {"duration": "5s"},
        },
        {"name": "rec.step", "taskReferenceName": "b"},
        {"name": "rec.step", "taskReferenceName": "c"},
    ],
}
TASKDEFS = [{"name": "rec.step", "retryCount": 0, "responseTimeoutSeconds": 3600}]
LOG_TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")


class Tail:
    """Every record of one topic from the start, with its arrival time (read_committed) and its
    producer timestamp, decoded by ``decode``."""

    def __init__(self, env: Env, topic: str, parts: int, decode: Callable[[bytes], Any]) -> None:
        self.rows: list[tuple[float, float, Any]] = []  # (arrival, create time, record)
        self.partitions: list[int] = []  # each row's partition
        self.completed_at: list[float] = []  # arrival of each task.completed, in order
        self.kinds: dict[str, int] = {}  # event type -> how many
        self.stop = threading.Event()
        self.args = (env.bootstrap, topic, parts, decode)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        bootstrap, topic, parts, decode = self.args
        cons = consumer(kafka_connection(bootstrap), None)
        cons.assign([TopicPartition(topic, p, 0) for p in range(parts)])
        while not self.stop.is_set():
            for msg in cons.consume(1000, 0.1):
                if msg.error() is None and msg.value():
                    now, record = time.time(), decode(msg.value() or b"")
                    self.rows.append((now, msg.timestamp()[1] / 1000, record))
                    self.partitions.append(msg.partition() or 0)
                    if isinstance(record, dict):
                        self.kinds[record["type"]] = self.kinds.get(record["type"], 0) + 1
                        if record["type"] == "task.completed":
                            self.completed_at.append(now)
        cons.close()


def feed(env: Env, rate: float, stop: threading.Event, sent: list[str]) -> None:
    """StartWorkflow commands at ``rate`` per second until ``stop``."""
    out = producer(kafka_connection(env.bootstrap))
    t0, n = time.time(), 0
    while not stop.is_set():
        while time.time() < t0 + n / rate:
            time.sleep(0.002)
        cid = f"{env.prefix}-{n}"
        cmd = c.StartWorkflow(
            cid, workflow_id_for_command(cid), name="recovery_flow", input={"n": n}
        )
        out.produce(env.topics.commands, key=cmd.workflow_id.encode(), value=encode_input(cmd))
        out.poll(0)
        sent.append(cmd.workflow_id)
        n += 1
    out.flush(30)


def log_times(role: Role, patterns: dict[str, str]) -> dict[str, float]:
    """The first log line matching each pattern: its wall-clock time (the log's asctime)."""
    found: dict[str, float] = {}
    for line in role.text().splitlines():
        m = LOG_TIME.match(line)
        for name, pattern in patterns.items():
            if m and name not in found and re.search(pattern, line):
                found[name] = datetime.strptime(m[1], "%Y-%m-%d %H:%M:%S,%f").timestamp()
    return found


def restored_records(role: Role) -> int:
    """Changelog records the restarted decider read to restore its partitions."""
    return sum(
        int(n) for n in re.findall(r"restored \d+ partitions: (\d+) records in", role.text())
    )


def restored_s(role: Role) -> float:
    """Seconds the restarted decider spent restoring changelog partitions (its own figures)."""
    return sum(
        float(s)
        for s in re.findall(r"restored \d+ partitions: \d+ records in ([\d.]+)s", role.text())
    )
