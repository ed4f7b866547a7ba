"""The decider changelog's three kinds of record, and reading one partition of it back.

Every record of a workflow lives on the partition of its workflow id (the decider writes them
with that partition explicitly), under one of three keys (ADR 18):

- ``<workflow id>``: the latest snapshot (``snapshots``), or a tombstone once the workflow ended
  and its state was retired;
- ``DEFINITION_KEY_PREFIX + <sha256>``: a definition bundle, written once per partition before
  the first snapshot that names it;
- ``ENDED_KEY_PREFIX + <workflow id>``: the ended marker of a retired workflow (status and last
  seq), written in the same transaction as its tombstone; compaction keeps it, small;
- ``<workflow id>#snapshot-chunk-<i>``: a part of a snapshot too large for one record, whose
  ``<workflow id>`` record is then a head naming its chunks (``chunks``, ADR 19).

``Changelog`` folds one partition's records in offset order and decodes the states only at the
end (``states()``), after every bundle has been read: compaction keeps the latest copy of a
bundle key, which may sit after a snapshot that names it. Only the latest snapshot of a key is
decoded.
"""

from __future__ import annotations

from collections.abc import Iterator

import orjson

from es_sched.domain.retention import ENDED_STATUSES, Ended
from es_sched.domain.state import WorkflowState
from es_sched.errors import SchemaError
from es_sched.serialization.chunks import joined
from es_sched.serialization.snapshots import (
    DEFINITION_KEY_PREFIX,
    Bundle,
    decode_bundle,
    decode_state,
)

ENDED_KEY_PREFIX = "~ended:"
ENDED_VERSION = 1


def definition_key(digest: str) -> str:
    return DEFINITION_KEY_PREFIX + digest


def ended_key(workflow_id: str) -> str:
    return ENDED_KEY_PREFIX + workflow_id


def encode_ended(ended: Ended) -> bytes:
    return orjson.dumps(
        {"ended_version": ENDED_VERSION, "workflow_id": ended.workflow_id,
         "status": ended.status, "seq": ended.seq},
        option=orjson.OPT_SORT_KEYS,
    )  # fmt: skip


def decode_ended(raw: bytes) -> Ended:
    try:
        doc = orjson.loads(raw)
        if doc["ended_version"] != ENDED_VERSION or doc["status"] not in ENDED_STATUSES:
            raise ValueError(f"version {doc['ended_version']!r}, status {doc['status']!r}")
        return Ended(str(doc["workflow_id"]), doc["status"], int(doc["seq"]))
    except (ValueError, KeyError, TypeError) as exc:
        raise SchemaError(f"unreadable ended marker: {exc}") from None


class Changelog:
    """One partition of the changelog, read in offset order (``feed``), then decoded."""

    def __init__(self) -> None:
        self.latest: dict[str, bytes] = {}
        self.bundles: dict[str, Bundle] = {}
        self.ended: dict[str, Ended] = {}
        self.records = 0

    def feed(self, key: str, value: bytes | None) -> None:
        self.records += 1
        if key.startswith(DEFINITION_KEY_PREFIX):
            if value is not None:
                digest = key.removeprefix(DEFINITION_KEY_PREFIX)
                self.bundles[digest] = decode_bundle(digest, value)
        elif key.startswith(ENDED_KEY_PREFIX):
            wf = key.removeprefix(ENDED_KEY_PREFIX)
            if value is None:
                self.ended.pop(wf, None)
            else:
                self.ended[wf] = decode_ended(value)
        elif value is None:
            self.latest.pop(key, None)
        else:
            self.latest[key] = value

    def states(self) -> Iterator[WorkflowState]:
        """The live states: each key's latest snapshot, decoded against the bundles read."""
        for wf, raw, _ in joined(self.latest):  # a large one: its chunks put together (ADR 19)
            if wf not in self.ended:  # retired: the marker is the newer word
                yield decode_state(raw, self.bundles)
