"""Snapshot format 2 (ADR 18): definitions by content hash, and a real version 1 snapshot upcast.

``tests/fixtures/snapshots/media_480_midrun.v1.json`` was written by the version 1 encoder (the
es-sched of before ADR 18) from the first 14 events of the golden ``media_480`` history: the
definition inline, a workflow mid-run. It must still restore, as the same state.
"""

from __future__ import annotations

import orjson
import pytest

from es_sched.domain.evolve import fold
from es_sched.errors import SchemaError
from es_sched.serialization.changelog import Changelog, definition_key
from es_sched.serialization.snapshots import (
    decode_bundle,
    decode_state,
    definition_record,
    encode_state,
    state_to_dict,
)
from tests.support import ROOT
from tests.support.golden import history

V1 = ROOT / "tests" / "fixtures" / "snapshots" / "media_480_midrun.v1.json"


def test_a_version_1_snapshot_is_upcast_to_the_state_it_was_taken_of() -> None:
    raw = V1.read_bytes()
    assert orjson.loads(raw)["snapshot_version"] == 1  # the fixture is what v1 wrote
    restored = decode_state(raw)
    folded = fold(history("media_480")[:14])
    assert folded is not None
    # the same document (a snapshot's keys keep the state's order, unsorted since issue 15)
    assert orjson.loads(encode_state(restored)) == orjson.loads(encode_state(folded))
    again = orjson.loads(encode_state(restored))
    assert again["snapshot_version"] == 2
    assert "definition" not in again and "taskdefs" not in again
    assert again["definition_hash"] == definition_record(folded)[0]


def test_a_version_2_snapshot_names_its_definition_and_is_far_smaller() -> None:
    st = fold(history("media_480")[:14])
    assert st is not None
    digest, bundle = definition_record(st)
    small = encode_state(st)
    assert len(small) * 2 < len(V1.read_bytes())  # the definition is most of a v1 snapshot
    with pytest.raises(SchemaError, match="not read"):
        decode_state(small)  # a restore must read the bundle first
    restored = decode_state(small, {digest: decode_bundle(digest, bundle)})
    assert state_to_dict(restored) == state_to_dict(st)


def test_a_changelog_partition_restores_whatever_order_compaction_left() -> None:
    """Compaction keeps the latest copy of a bundle key, which may follow a snapshot naming it."""
    st = fold(history("media_480")[:14])
    assert st is not None
    digest, bundle = definition_record(st)
    log = Changelog()
    log.feed(st.workflow_id, encode_state(st))
    log.feed(definition_key(digest), bundle)
    [restored] = log.states()
    assert restored.seq == st.seq


def test_a_bundle_that_does_not_hash_to_its_key_is_refused() -> None:
    st = fold(history("media_480")[:14])
    assert st is not None
    _, bundle = definition_record(st)
    with pytest.raises(SchemaError, match="hashing to"):
        decode_bundle("0" * 64, bundle)


def test_an_unknown_snapshot_version_is_refused() -> None:
    doc = orjson.loads(V1.read_bytes())
    doc["snapshot_version"] = 99
    with pytest.raises(SchemaError, match="unknown snapshot_version 99"):
        decode_state(orjson.dumps(doc))
