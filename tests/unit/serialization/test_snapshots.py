"""Snapshot format 2 (ADR 18): definitions by content hash, and a real version 1 snapshot upcast.

``tests/fixtures/snapshots/media_480_midrun.v1.json`` was written by the version 1 encoder (the
es-sched of before ADR 18) from the first 14 events of the golden ``media_480`` history: the
definition inline, a workflow mid-run. It must still restore, as the same state.
"""

from __future__ import annotations

import dataclasses
import hashlib
from datetime import datetime

import orjson
import pytest

from es_sched.domain.evolve import fold
from es_sched.domain.parsed import parse_workflow_cached
from es_sched.domain.state import TaskState
from es_sched.errors import SchemaError
from es_sched.serialization.changelog import Changelog, definition_key
from es_sched.serialization.snapshots import (
    Bundle,
    decode_bundle,
    decode_state,
    definition_record,
    encode_state,
    state_to_dict,
)
from testkit import ROOT
from testkit.golden import history

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


def _snapshot_of_media(events: int) -> tuple[bytes, dict[str, Bundle]]:
    st = fold(history("media_480")[:events])
    assert st is not None
    digest, bundle = definition_record(st)
    return encode_state(st), {digest: decode_bundle(digest, bundle)}


def test_a_restored_state_equals_the_fold_at_every_point_of_a_history() -> None:
    """Task rows carrying every field are restored as ``TaskState.clone`` copies; the state is
    still the very one the fold made, field by field, times parsed."""
    events = history("media_480")
    for n in range(1, len(events) + 1):
        raw, bundles = _snapshot_of_media(n)
        folded = fold(events[:n])
        restored = decode_state(raw, bundles)
        assert restored == folded, n
        for task in restored.tasks.values():
            assert isinstance(task.scheduled_at, datetime)
            assert vars(task).keys() == vars(TaskState(**vars(task))).keys()


def test_a_task_row_without_a_newer_field_takes_its_default_and_an_unknown_one_is_refused() -> None:
    raw, bundles = _snapshot_of_media(14)
    doc = orjson.loads(raw)
    del doc["tasks"][0]["rate_limit_key"]  # a snapshot written before the field existed
    doc["tasks"][0]["priority"] = 2
    restored = decode_state(orjson.dumps(doc), bundles)
    first = restored.tasks[doc["tasks"][0]["task_id"]]
    assert (first.rate_limit_key, first.priority) == (None, 2)
    doc["tasks"][1]["colour"] = "blue"
    with pytest.raises(SchemaError, match=r"unreadable decider snapshot.*colour"):
        decode_state(orjson.dumps(doc), bundles)


def test_the_states_of_one_bundle_share_its_taskdefs_parsed_once() -> None:
    raw, bundles = _snapshot_of_media(14)
    first, second = decode_state(raw, bundles), decode_state(raw, bundles)
    assert first.taskdefs is second.taskdefs
    folded = fold(history("media_480")[:14])
    assert folded is not None and dict(first.taskdefs) == dict(folded.taskdefs)
    assert len(first.taskdefs) > 0


def test_the_bundle_follows_each_of_the_three_documents_a_state_holds() -> None:
    """``definition_record`` is memoised on the objects a state holds its documents in: a
    state that holds another of any of the three gets that bundle's hash, never the last one."""
    st = fold(history("media_480")[:14])
    assert st is not None
    digest, raw = definition_record(st)
    assert definition_record(st.clone()) == (digest, raw)  # a clone shares all three
    subs = dataclasses.replace(st, subworkflow_definitions=({"name": "child", "tasks": []},))
    fewer = dataclasses.replace(st, taskdefs=dict(list(st.taskdefs.items())[1:]))
    one_task = {"name": "one", "version": 1, "tasks": [{"name": "u", "taskReferenceName": "u"}]}
    definition, problems = parse_workflow_cached(one_task)
    assert definition is not None and not problems
    mixed = dataclasses.replace(st, definition=definition)  # another definition alone
    hashes = {digest}
    for changed in (subs, fewer, mixed):
        got, bundle = definition_record(changed)
        assert got == hashlib.sha256(bundle).hexdigest()
        doc = orjson.loads(bundle)
        assert doc["definition"] == changed.definition.raw
        assert doc["taskdefs"] == [td.raw for td in changed.taskdefs.values()]
        assert doc["subworkflow_definitions"] == list(changed.subworkflow_definitions)
        hashes.add(got)
    assert len(hashes) == 4
