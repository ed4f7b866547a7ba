"""A large workflow state is written as changelog records under the broker's limit (ADR 19)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from es_sched.errors import SchemaError
from es_sched.kafka.topics import Topics
from es_sched.runtime.outbox import snapshot
from es_sched.serialization.chunks import CHUNK_BYTES, Assembler, chunk_key, split
from es_sched.serialization.snapshots import encode_state
from tests.unit.domain.test_fanout import fan_out, restored

KAFKA_DEFAULT_MAX = 1_000_000  # librdkafka's message.max.bytes; the broker's is 1,048,588
TOPICS = Topics("t", 4)


def replayed(*batches: Sequence[tuple[str, bytes | None]]) -> Assembler:
    found = Assembler()
    for batch in batches:
        for key, value in batch:
            found.add(key, value)
    return found


def test_a_2000_branch_state_is_written_as_records_under_the_limit_and_restored() -> None:
    drv = fan_out(2_000)
    for i in range(0, 2_000, 3):
        drv.report(f"b{i}")
    raw = encode_state(drv.st)
    assert len(raw) > KAFKA_DEFAULT_MAX, "the test needs a state over the limit"
    records, chunks = snapshot(TOPICS, drv.st, 2, set())
    assert records[0].key.startswith("~def:")  # the definition bundle (ADR 18)
    records = records[1:]
    assert chunks == len(records) - 1 > 1
    assert all(len(r.key) + len(r.value or b"") < KAFKA_DEFAULT_MAX for r in records)
    assert {r.partition for r in records} == {2}  # chunks on the head's partition
    assert records[-1].key == drv.st.workflow_id  # the head last
    [(wf, joined, count)] = list(replayed([(r.key, r.value) for r in records]).snapshots())
    assert (wf, joined, count) == (drv.st.workflow_id, raw, chunks)
    state = restored(drv.st)  # through the changelog reader, as a restore reads it
    assert state == drv.st and state.fans == drv.st.fans


def test_a_small_state_is_one_record_as_before() -> None:
    drv = fan_out(3)
    records, chunks = snapshot(TOPICS, drv.st, 0, set())
    records = records[1:]  # after the definition bundle
    assert chunks == 0 and [r.key for r in records] == [drv.st.workflow_id]
    assert records[0].value == encode_state(drv.st)


def test_chunks_a_smaller_snapshot_no_longer_needs_are_tombstoned() -> None:
    first = split("wf", b"x" * (3 * CHUNK_BYTES + 5))
    later = split("wf", b"y" * 10)
    drv = fan_out(3)
    records, _ = snapshot(TOPICS, drv.st, 0, set(), previous_chunks=4)
    gone = [r.key for r in records if r.value is None]
    assert gone == [chunk_key(drv.st.workflow_id, i) for i in range(1, 5)]
    found = replayed(first, later, [(chunk_key("wf", i), None) for i in range(1, 5)])
    assert list(found.snapshots()) == [("wf", b"y" * 10, 0)]
    assert found.values.keys() == {"wf"}


def test_the_latest_head_and_its_chunks_win_and_a_missing_chunk_is_refused() -> None:
    old = split("wf", b"a" * (2 * CHUNK_BYTES + 1))
    new = split("wf", b"b" * (2 * CHUNK_BYTES + 7))
    assert list(replayed(old, new).snapshots()) == [("wf", b"b" * (2 * CHUNK_BYTES + 7), 3)]
    broken = replayed(new)
    broken.add(chunk_key("wf", 2), None)
    with pytest.raises(SchemaError, match="missing"):
        list(broken.snapshots())
    mixed = replayed(old, new[:1], old[1:2], new[2:])  # chunk 2 from an older snapshot
    with pytest.raises(SchemaError, match="do not match"):
        list(mixed.snapshots())
