"""A snapshot too large for one Kafka record, split across several changelog records.

A workflow with a large fan-out has a large state (10,000 branches: about 8 MB of JSON), and a
record over the broker's ``message.max.bytes`` (1 MB by default) cannot be written at all. So an
encoded snapshot over ``CHUNK_BYTES`` is cut into chunk records keyed ``<wf>#snapshot-chunk-<i>``
(i = 1..k) and a small head record keyed ``<wf>`` that names their number, total size and
SHA-256: ``{"snapshot_chunks": k, "bytes": n, "sha256": "..."}``. The decider writes all of
them in the batch's transaction (chunks before the head, on the head's partition), so a
``read_committed`` restore sees a head and its chunks from the same batch; ``Assembler`` puts the
bytes back together and checks them. A snapshot under the bound is one record, as before.

This works on the encoded bytes, whatever the snapshot document holds (``snapshots``).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator, Mapping

import orjson

from es_sched.errors import SchemaError

CHUNK_BYTES = 512 * 1024  # well under the 1 MB default message.max.bytes, with the key and headers
_HEAD = b'{"snapshot_chunks":'
_CHUNK_KEY = re.compile(r"#snapshot-chunk-\d+$")


def chunk_key(workflow_id: str, number: int) -> str:
    return f"{workflow_id}#snapshot-chunk-{number}"


def split(workflow_id: str, raw: bytes, limit: int = CHUNK_BYTES) -> list[tuple[str, bytes]]:
    """(key, value) records for one encoded snapshot, the head (keyed by the workflow) last."""
    if len(raw) <= limit:
        return [(workflow_id, raw)]
    parts = [raw[i : i + limit] for i in range(0, len(raw), limit)]
    head = {
        "snapshot_chunks": len(parts),
        "bytes": len(raw),
        "sha256": hashlib.sha256(raw).hexdigest(),
    }
    chunks = [(chunk_key(workflow_id, i), part) for i, part in enumerate(parts, start=1)]
    return [*chunks, (workflow_id, orjson.dumps(head))]


def chunk_count(value: bytes | None) -> int:
    """How many chunk records a head names (0: a whole snapshot, a tombstone)."""
    if value is None or not value.startswith(_HEAD):
        return 0
    return int(orjson.loads(value)["snapshot_chunks"])


def joined(values: Mapping[str, bytes]) -> Iterator[tuple[str, bytes, int]]:
    """(workflow id, snapshot bytes, chunk records it took) for every workflow key among the
    latest ``values`` of a changelog partition: a head's chunks put together and checked."""
    for key, value in values.items():
        if _CHUNK_KEY.search(key):
            continue
        count = chunk_count(value)
        yield key, (_joined(values, key, value) if count else value), count


def _joined(values: Mapping[str, bytes], workflow_id: str, head: bytes) -> bytes:
    doc = orjson.loads(head)
    count = doc["snapshot_chunks"]
    parts = [values.get(chunk_key(workflow_id, i)) for i in range(1, count + 1)]
    if any(p is None for p in parts):
        raise SchemaError(f"snapshot of {workflow_id}: a chunk record is missing")
    raw = b"".join(p for p in parts if p is not None)
    if len(raw) != doc["bytes"] or hashlib.sha256(raw).hexdigest() != doc["sha256"]:
        raise SchemaError(f"snapshot of {workflow_id}: its chunks do not match their head")
    return raw


class Assembler:
    """The latest value of every key of a changelog partition, read in offset order; then
    each workflow's snapshot bytes (``joined``)."""

    def __init__(self) -> None:
        self.values: dict[str, bytes] = {}

    def add(self, key: str, value: bytes | None) -> None:
        if value is None:
            self.values.pop(key, None)  # a tombstone: the workflow (or a stale chunk) is gone
        else:
            self.values[key] = value

    def snapshots(self) -> Iterator[tuple[str, bytes, int]]:
        return joined(self.values)
