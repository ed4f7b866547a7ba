"""Recorded histories decode (validating and upcasting old versions) and fold to the recorded
state: stored history keeps its meaning across code changes."""

from __future__ import annotations

import json

import pytest

from es_sched.domain.evolve import fold
from es_sched.serialization import decode_event, encode_event, event_to_dict
from tests.unit.core.golden import GOLDEN, summary

NAMES = sorted(p.name.removesuffix(".events.jsonl") for p in GOLDEN.glob("*.events.jsonl"))


def test_there_are_golden_histories() -> None:
    assert {"media_1080_v1", "media_480", "media_transcode_exhausted"} <= set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_golden_history_folds_to_its_recorded_state(name: str) -> None:
    lines = (GOLDEN / f"{name}.events.jsonl").read_bytes().splitlines()
    events = [decode_event(line) for line in lines]
    state = fold(events)
    assert state is not None
    expected = json.loads((GOLDEN / f"{name}.expected.json").read_text())
    assert json.loads(json.dumps(summary(state))) == expected


def test_the_v1_history_really_is_v1() -> None:
    docs = [
        json.loads(line)
        for line in (GOLDEN / "media_1080_v1.events.jsonl").read_text().splitlines()
    ]
    scheduled = [d for d in docs if d["type"] == "task.scheduled"]
    assert scheduled and all(d["schema_version"] == 1 for d in scheduled)
    assert all("callback" not in d["payload"] for d in scheduled)


@pytest.mark.parametrize("name", NAMES)
def test_the_fast_encoder_writes_the_same_document_as_event_to_dict(name: str) -> None:
    for line in (GOLDEN / f"{name}.events.jsonl").read_bytes().splitlines():
        event = decode_event(line)
        assert json.loads(encode_event(event)) == event_to_dict(event)
