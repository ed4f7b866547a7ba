"""The limit: how many records/s a Python transactional consume -> produce loop moves on this
broker, the ceiling any Kafka-transactional decider written in Python works under.

One loop, as es_sched/kafka/transactional.py's minus the role: a ``read_committed`` group
consumer, a transactional producer (es-sched's producer settings), per batch of up to 500 or
2,000 records: begin, produce every record, ``send_offsets_to_transaction``, commit. With
decoding, each record is decoded and re-encoded with orjson on the way (a decider must read its
inputs and write its outputs); without, the bytes pass through. The input is the mix a media
workflow feeds the decider (a StartWorkflow command, then per worker task the dispatcher's
DispatchTask and the worker's started and completed reports, with a transcode-like output),
encoded by es_sched.serialization, on fresh 12-partition topics deleted afterwards.
records/s = records / (last commit - first batch received); medians of ``--runs``, the
variants interleaved in each round.

Each variant runs twice: with es-sched's producer settings (es_sched.kafka.clients), and with
``retry.backoff.ms=10``. Right after a commit, the next transaction's AddPartitionsToTxn is
refused with CONCURRENT_TRANSACTIONS until the coordinator has written the markers; librdkafka
retries after ``retry.backoff.ms``, 100 ms by default, so with the defaults a loop makes at most
about 10 transactions/s whatever the batch (measured here: ~7,000 records/s in batches of 500
against ~34,000 with 10 ms). The tuned figure is the limit; the other shows what the setting
costs.

Importable (``measure``, used by bench/side_by_side.py) and runnable:
`PYTHONPATH=. .venv/bin/python bench/kafka_limit.py [--records 100000 --runs 3]`
(needs `es-sched stack up`; writes bench/results/current/kafka_limit.json).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from es_sched.domain import commands as c  # noqa: E402
from es_sched.kafka.clients import producer, producer_config  # noqa: E402
from es_sched.serialization import encode_input  # noqa: E402
from testkit.settings import (  # noqa: E402
    BOOTSTRAP,
    kafka_connection,
)

BATCHES = (500, 2000)
PARTITIONS = 12
TUNED_BACKOFF_MS = 10  # librdkafka's default 100 ms stalls each transaction (see docstring)


def media_records(n: int) -> list[tuple[bytes, bytes]]:
    """(key, value) pairs shaped like a media workflow's decider inputs, ``n`` of them."""
    out: list[tuple[bytes, bytes]] = []
    w = 0
    while len(out) < n:
        wid = str(uuid.uuid4())
        start = c.StartWorkflow(
            f"cmd-{w}",
            wid,
            name="media_pipeline",
            input={
                "source_uri": f"file:///{w}.mp4",
                "asset_id": f"a{w}",
                "callback_url": "http://cb",
            },
        )
        batch: list[c.Input] = [start]
        for t in range(9):
            task = f"{wid}:task{t}"
            ids: dict[str, Any] = {"task_id": task, "worker_id": "noop-1", "lease_token": "tok"}
            batch.append(c.DispatchTask(str(uuid.uuid4()), wid, **ids))
            batch.append(c.ReportStarted(str(uuid.uuid4()), wid, **ids))
            batch.append(
                c.ReportCompleted(
                    str(uuid.uuid4()),
                    wid,
                    **ids,
                    output={
                        "uri": f"s3://bucket/{wid}/{t}.mp4",
                        "sha256": "ab" * 32,
                        "height": 1080,
                        "codec": "h264",
                        "bytes": 123456789,
                        "duration_s": 61.2,
                    },
                )
            )
        out += [(i.workflow_id.encode(), encode_input(i)) for i in batch]
        w += 1
    return out[:n]


def _reencode(value: bytes) -> bytes:
    return orjson.dumps(orjson.loads(value))


def _same(value: bytes) -> bytes:
    return value


def one_loop(
    topic_in: str, topic_out: str, records: int, batch: int, decode: bool, backoff_ms: int | None
) -> float:
    """Move ``records`` from ``topic_in`` to ``topic_out`` in transactions; records/s."""
    tag = uuid.uuid4().hex[:8]
    cons = Consumer(
        {
            **kafka_connection(BOOTSTRAP).config(),
            "group.id": f"limit-{tag}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    tuned = {} if backoff_ms is None else {"retry.backoff.ms": backoff_ms}
    prod = producer(kafka_connection(BOOTSTRAP), f"limit-{tag}", **tuned)
    prod.init_transactions(30)
    cons.subscribe([topic_in])
    step: Callable[[bytes], bytes] = _reencode if decode else _same
    moved, t0 = 0, 0.0
    deadline = time.monotonic() + 300
    try:
        while moved < records and time.monotonic() < deadline:
            msgs = [m for m in cons.consume(batch, 0.5) if m.error() is None]
            if not msgs:
                continue
            if not t0:
                t0 = time.perf_counter()
            prod.begin_transaction()
            for m in msgs:
                prod.produce(topic_out, key=m.key(), value=step(m.value() or b""))
            prod.send_offsets_to_transaction(
                cons.position(cons.assignment()), cons.consumer_group_metadata(), 30
            )
            prod.commit_transaction(30)
            moved += len(msgs)
        return moved / (time.perf_counter() - t0)
    finally:
        cons.close()


def measure(records: int, runs: int, log: Callable[[str], None] = print) -> dict[str, Any]:
    """records/s per (batch, decode), each run's figure and the median."""
    prefix = f"limit-{uuid.uuid4().hex[:8]}"
    topic_in, topic_out = f"{prefix}.in", f"{prefix}.out"
    admin = AdminClient(kafka_connection(BOOTSTRAP).config())
    for f in admin.create_topics(
        [NewTopic(t, PARTITIONS, 1) for t in (topic_in, topic_out)], operation_timeout=30
    ).values():
        f.result()
    try:
        fill = producer(kafka_connection(BOOTSTRAP))
        for key, value in media_records(records):
            while True:
                try:
                    fill.produce(topic_in, key=key, value=value)
                    break
                except BufferError:
                    fill.poll(0.05)
            fill.poll(0)
        assert fill.flush(60) == 0
        size = sum(len(v) for _, v in media_records(1000)) / 1000
        shown = ("acks", "linger.ms", "compression.type")
        config = {
            k: v for k, v in producer_config(kafka_connection(BOOTSTRAP)).items() if k in shown
        }
        figures: dict[str, Any] = {
            "records": records,
            "mean_record_bytes": round(size),
            "producer": config,
        }
        variants = [
            (b, d, k) for k in (TUNED_BACKOFF_MS, None) for b in BATCHES for d in (False, True)
        ]
        names = {
            v: f"batch {v[0]}, "
            + ("orjson decode+encode" if v[1] else "bytes")
            + (f", retry.backoff.ms={v[2]}" if v[2] else ", es-sched producer settings")
            for v in variants
        }
        per_run: dict[str, list[float]] = {names[v]: [] for v in variants}
        for _ in range(runs):  # interleaved: every variant once per round
            for v in variants:
                per_run[names[v]].append(round(one_loop(topic_in, topic_out, records, *v)))
        for name, rates in per_run.items():
            figures[name] = {"per_run": rates, "median": statistics.median(rates)}
            log(f"kafka limit, {name}: {figures[name]['median']:.0f} records/s {rates}")
        return figures
    finally:
        for f in admin.delete_topics([topic_in, topic_out], operation_timeout=30).values():
            f.result()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    opts = parser.parse_args()
    result = {"benchmark": "kafka_limit", **measure(opts.records, opts.runs)}
    (ROOT / "bench" / "results" / "current" / "kafka_limit.json").write_text(
        json.dumps(result, indent=2)
    )


if __name__ == "__main__":
    main()
