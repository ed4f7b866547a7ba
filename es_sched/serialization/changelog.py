"""The decider changelog's three kinds of record, and reading one partition of it back.

Every record of a workflow lives on the partition of its workflow id (the decider writes them
with that partition explicitly), under one of these keys (ADR 18):

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

The snapshot of an ended workflow carries an ``es-sched-ended`` header: its status, last seq and
end time, what retention reads (``domain.retention``). A decider restoring a partition keeps such
a snapshot undecoded (``kept()`` yields a ``Resting``) and decodes it only if an input names the
workflow again (ADR 52): most never do before they are retired. A snapshot without the header
(a live workflow's, or one written before it existed) is decoded at once, as before.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from typing import NamedTuple

import orjson

from es_sched.domain.retention import ENDED_STATUSES, Ended
from es_sched.domain.state import WORKFLOW_TERMINAL, WorkflowState
from es_sched.errors import SchemaError
from es_sched.serialization.chunks import joined
from es_sched.serialization.codec import format_time, parse_time
from es_sched.serialization.snapshots import (
    DEFINITION_KEY_PREFIX,
    Bundle,
    decode_bundle,
    decode_state,
)

ENDED_KEY_PREFIX = "~ended:"
ENDED_VERSION = 1
ENDED_HEADER = "es-sched-ended"  # on the snapshot (or chunked snapshot's head) of an ended state
# A record's headers as confluent-kafka gives them (a list of pairs, typed as either).
Headers = Sequence[tuple[str, str | bytes | None]] | Mapping[str, str | bytes | None]


def definition_key(digest: str) -> str:
    return DEFINITION_KEY_PREFIX + digest


def ended_key(workflow_id: str) -> str:
    return ENDED_KEY_PREFIX + workflow_id


def encode_ended(ended: Ended) -> bytes:
    return orjson.dumps(
        {
            "ended_version": ENDED_VERSION,
            "workflow_id": ended.workflow_id,
            "status": ended.status,
            "seq": ended.seq,
        },
        option=orjson.OPT_SORT_KEYS,
    )


def decode_ended(raw: bytes) -> Ended:
    try:
        doc = orjson.loads(raw)
        if doc["ended_version"] != ENDED_VERSION or doc["status"] not in ENDED_STATUSES:
            raise ValueError(f"version {doc['ended_version']!r}, status {doc['status']!r}")
        return Ended(str(doc["workflow_id"]), doc["status"], int(doc["seq"]))
    except (ValueError, KeyError, TypeError) as exc:
        raise SchemaError(f"unreadable ended marker: {exc}") from None


class Resting(NamedTuple):
    """An ended workflow's snapshot kept as read (ADR 52), with what retention needs to know
    of it without decoding: ``status``, ``seq`` and ``ended_at`` from its header."""

    workflow_id: str
    status: str
    seq: int
    ended_at: datetime
    raw: bytes
    bundles: Mapping[str, Bundle]

    def state(self) -> WorkflowState:
        return decode_state(self.raw, self.bundles)


def ended_header(st: WorkflowState) -> tuple[str, bytes] | None:
    """The header of ``st``'s snapshot when it ended (what ``Resting`` holds), else None."""
    if st.status not in WORKFLOW_TERMINAL or st.ended_at is None:
        return None
    doc = {
        "v": ENDED_VERSION,
        "status": st.status,
        "seq": st.seq,
        "ended_at": format_time(st.ended_at),
    }
    return ENDED_HEADER, orjson.dumps(doc)


def read_ended_header(headers: Headers | None) -> tuple[str, int, datetime] | None:
    """(status, seq, ended_at) from a snapshot's headers; None without the header. One this
    code cannot read is a ``SchemaError``: a newer writer's, never to be guessed at."""
    for name, value in headers.items() if isinstance(headers, Mapping) else headers or ():
        if name != ENDED_HEADER:
            continue
        try:
            doc = orjson.loads(value or b"")
            if doc["v"] != ENDED_VERSION or doc["status"] not in WORKFLOW_TERMINAL:
                raise ValueError(f"version {doc['v']!r}, status {doc['status']!r}")
            return doc["status"], int(doc["seq"]), parse_time(doc["ended_at"], ENDED_HEADER)
        except (ValueError, KeyError, TypeError) as exc:
            raise SchemaError(f"unreadable {ENDED_HEADER} header: {exc}") from None
    return None


class Changelog:
    """One partition of the changelog, read in offset order (``feed``), then decoded."""

    def __init__(self) -> None:
        self.latest: dict[str, bytes] = {}
        self.bundles: dict[str, Bundle] = {}
        self.ended: dict[str, Ended] = {}
        self.endings: dict[str, tuple[str, int, datetime]] = {}  # latest snapshot's header
        self.records = 0

    def feed(self, key: str, value: bytes | None, headers: Headers | None = None) -> None:
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
            self.endings.pop(key, None)
        else:
            self.latest[key] = value
            ending = read_ended_header(headers) if headers else None
            if ending is None:
                self.endings.pop(key, None)
            else:
                self.endings[key] = ending

    def states(self) -> Iterator[WorkflowState]:
        """The live states: each key's latest snapshot, decoded against the bundles read."""
        for kept in self.kept():
            yield kept.state() if isinstance(kept, Resting) else kept

    def kept(self) -> Iterator[WorkflowState | Resting]:
        """``states()`` as a decider keeps them: an ended workflow's snapshot that says so in
        its header stays undecoded (``Resting``), every other one is decoded."""
        for wf, raw, _ in joined(self.latest):  # a large one: its chunks put together (ADR 19)
            if wf in self.ended:  # retired: the marker is the newer word
                continue
            ending = self.endings.get(wf)
            if ending is None:
                yield decode_state(raw, self.bundles)
            else:
                yield Resting(wf, *ending, raw, self.bundles)
