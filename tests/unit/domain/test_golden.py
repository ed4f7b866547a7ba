"""Recorded histories decode (validating and upcasting old versions) and fold to the recorded
state: stored history keeps its meaning across code changes."""

from __future__ import annotations

import json

import pytest

from es_sched.domain.evolve import fold
from es_sched.serialization import decode_event, encode_event, event_to_dict
from testkit.golden import NAMES, expected, history, lines
from tests.unit.domain.golden import summary


def test_there_are_golden_histories() -> None:
    assert {"media_1080_v1", "media_480", "media_transcode_exhausted"} <= set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_golden_history_folds_to_its_recorded_state(name: str) -> None:
    state = fold(history(name))
    assert state is not None
    assert json.loads(json.dumps(summary(state))) == expected(name)


def test_the_v1_history_really_is_v1() -> None:
    docs = [json.loads(line) for line in lines("media_1080_v1")]
    scheduled = [d for d in docs if d["type"] == "task.scheduled"]
    assert scheduled and all(d["schema_version"] == 1 for d in scheduled)
    assert all("callback" not in d["payload"] for d in scheduled)


@pytest.mark.parametrize("name", NAMES)
def test_the_fast_encoder_writes_the_same_document_as_event_to_dict(name: str) -> None:
    for line in lines(name):
        event = decode_event(line)
        assert json.loads(encode_event(event)) == event_to_dict(event)
