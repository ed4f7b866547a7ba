"""Bench-only: every Kafka client a process creates writes librdkafka's statistics to a file.

bench/client_requests.py puts this folder on the ``PYTHONPATH`` of the es-sched processes it starts
(``e2e.EXTRA_PATH``), so es-sched itself is unchanged: Python imports ``sitecustomize`` at
start-up, and this one replaces ``confluent_kafka.Producer`` and ``Consumer`` with subclasses
that add ``statistics.interval.ms`` and a ``stats_cb`` before es_sched imports them. Each client
overwrites ``$ES_BENCH_CLIENT_STATS/<pid>-<n>.json`` with its latest statistics (librdkafka's
cumulative counters: requests sent per broker by API, ``brokers.*.req``; librdkafka hands them
over in ``poll``) and names, in
``<pid>-<n>.where``, the es_sched source line that created it.
"""

from __future__ import annotations

import itertools
import json
import linecache
import os
import sys
from types import FrameType
from typing import Any

import confluent_kafka

DIR = os.environ.get("ES_BENCH_CLIENT_STATS", "")
INTERVAL_MS = int(os.environ.get("ES_BENCH_CLIENT_STATS_MS", "1000"))
_numbers = itertools.count()


def _where() -> str:
    """The first es_sched frame outside the client factory: module, function and source line."""
    frame: FrameType | None = sys._getframe(3)
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if module.startswith("es_sched") and module != "es_sched.kafka.clients":
            line = linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()
            return f"{module}.{frame.f_code.co_name}: {line}"
        frame = frame.f_back
    return "?"


def _with_stats(config: dict[str, Any], kind: str) -> dict[str, Any]:
    name = f"{os.getpid()}-{next(_numbers)}"
    with open(os.path.join(DIR, name + ".where"), "w") as fh:
        json.dump({"kind": kind, "where": _where(), "argv": sys.argv}, fh)

    def write(raw: str) -> None:
        tmp = os.path.join(DIR, name + ".tmp")
        with open(tmp, "w") as fh:
            fh.write(raw)
        os.replace(tmp, os.path.join(DIR, name + ".json"))

    return {**config, "statistics.interval.ms": INTERVAL_MS, "stats_cb": write}


if DIR:

    class Producer(confluent_kafka.Producer):
        def __init__(self, config: dict[str, Any], **kwargs: Any) -> None:
            config = _with_stats(
                config, "transactional producer" if "transactional.id" in config else "producer"
            )
            super().__init__(config, **kwargs)

    class Consumer(confluent_kafka.Consumer):
        def __init__(self, config: dict[str, Any], **kwargs: Any) -> None:
            super().__init__(_with_stats(config, "consumer"), **kwargs)

        def get_watermark_offsets(self, *args: Any, **kwargs: Any) -> Any:
            """Statistics are handed over by ``poll``; a client that only asks where a
            partition ends (the worker's read-to-the-end before a start) never polls.
            Poll it here when it reads nothing (no assignment: nothing can be consumed)."""
            found = super().get_watermark_offsets(*args, **kwargs)
            if not self.assignment():
                self.poll(0)
            return found

    confluent_kafka.Producer = Producer  # type: ignore[misc,assignment]
    confluent_kafka.Consumer = Consumer  # type: ignore[misc,assignment]
