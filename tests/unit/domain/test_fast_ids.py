"""The decider's deterministic ids: the fast uuid5 spells exactly what ``uuid.uuid5`` does, so
ids written before it (events, workflows, timers) are the same ids after it."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from es_sched.domain import ids


@given(st.text())
def test_fast_uuid5_is_uuid5(name: str) -> None:
    try:
        expected = str(uuid.uuid5(ids.NAMESPACE, name))
    except UnicodeEncodeError:  # lone surrogates: both refuse them
        with pytest.raises(UnicodeEncodeError):
            ids._uuid5(name)
        return
    assert ids._uuid5(name) == expected


def test_every_id_kind_is_the_uuid5_it_was() -> None:
    ns = ids.NAMESPACE
    assert ids.event_id("wf", 3) == str(uuid.uuid5(ns, "event:wf:3"))
    assert ids.refusal_event_id("wf", "in") == str(uuid.uuid5(ns, "refusal:wf:in"))
    assert ids.workflow_id_for_command("c-1") == str(uuid.uuid5(ns, "workflow:c-1"))
    assert ids.timer_id("wf", "wait", "t") == str(uuid.uuid5(ns, "timer:wf:wait:t"))
