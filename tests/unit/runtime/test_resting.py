"""Ended workflows restored undecoded (ADR 52): the snapshot's ``es-sched-ended`` header, the
changelog's ``kept()``, and the decider's ``KeptStates``.

The header must say what the snapshot says, or retention would retire a workflow at another
time or under another status than its state holds: checked on every golden history's end.
"""

from __future__ import annotations

from functools import partial

import orjson
import pytest

from es_sched.domain.evolve import fold
from es_sched.domain.state import WORKFLOW_TERMINAL, WorkflowState
from es_sched.errors import SchemaError
from es_sched.kafka.topics import Topics
from es_sched.projections.replay import Replayed, Snapshots, verify_changelog
from es_sched.runtime import outbox
from es_sched.runtime.decider_states import KeptStates
from es_sched.runtime.outbox import Record, snapshot
from es_sched.serialization.changelog import (
    ENDED_HEADER,
    Changelog,
    Resting,
    read_ended_header,
)
from es_sched.serialization.chunks import split
from es_sched.serialization.snapshots import encode_state
from testkit.golden import NAMES, history
from testkit.settings import settings_with

TOPICS = Topics("t", 4)


def _ends() -> list[WorkflowState]:
    states = [fold(history(name)) for name in NAMES]
    return [st for st in states if st is not None]


def _feed(log: Changelog, records: list[Record], headers: bool = True) -> None:
    for r in records:
        log.feed(r.key, r.value, r.headers if headers else None)


def _doc(st: WorkflowState) -> object:
    return orjson.loads(encode_state(st))


def test_every_golden_history_restores_resting_when_ended_and_decodes_to_its_state() -> None:
    """Each history's end (all four ended) and its middle (running), each on a changelog of its
    own (the histories share workflow ids)."""
    seen = set()
    for name in NAMES:
        events = history(name)
        for st in (fold(events[: len(events) // 2]), fold(events)):
            assert st is not None
            log = Changelog()
            _feed(log, snapshot(TOPICS, st, 0, set())[0])
            [k] = log.kept()
            ended = st.status in WORKFLOW_TERMINAL
            seen.add(ended)
            if not ended:
                assert isinstance(k, WorkflowState) and _doc(k) == _doc(st)
                continue
            assert isinstance(k, Resting), name
            assert (k.workflow_id, k.status, k.seq, k.ended_at) == (
                st.workflow_id,
                st.status,
                st.seq,
                st.ended_at,
            )
            assert _doc(k.state()) == _doc(st)  # the header and the snapshot agree
            [decoded] = log.states()  # what an auditor reads: decoded, as before
            assert _doc(decoded) == _doc(st)
    assert seen == {True, False}


def test_a_snapshot_without_the_header_is_decoded_at_once() -> None:
    """Written before ADR 52 (or by a writer without it): restored as before, decoded."""
    [st, *_] = [s for s in _ends() if s.status in WORKFLOW_TERMINAL]
    log = Changelog()
    _feed(log, snapshot(TOPICS, st, 0, set())[0], headers=False)
    [k] = log.kept()
    assert isinstance(k, WorkflowState) and _doc(k) == _doc(st)


def test_the_latest_snapshot_decides_resting_a_rerun_is_live_and_a_tombstone_is_gone() -> None:
    [st, *_] = [s for s in _ends() if s.status in WORKFLOW_TERMINAL]
    records, _ = snapshot(TOPICS, st, 0, set())
    log = Changelog()
    _feed(log, records)
    [k] = log.kept()
    assert isinstance(k, Resting)
    log.feed(st.workflow_id, records[-1].value)  # live again (a rerun): no header
    [k] = log.kept()
    assert isinstance(k, WorkflowState)
    _feed(log, records[-1:])
    log.feed(st.workflow_id, None)  # retired: tombstoned
    assert list(log.kept()) == [] and st.workflow_id not in log.endings


def test_a_chunked_snapshot_carries_the_header_on_its_head(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    [st, *_] = [s for s in _ends() if s.status in WORKFLOW_TERMINAL]
    monkeypatch.setattr(outbox, "split", partial(split, limit=300))
    records, chunks = snapshot(TOPICS, st, 0, set())
    assert chunks > 1
    assert [r.headers is not None for r in records[-chunks - 1 :]] == [False] * chunks + [True]
    log = Changelog()
    _feed(log, records)
    [k] = log.kept()
    assert isinstance(k, Resting) and _doc(k.state()) == _doc(st)


@pytest.mark.parametrize(
    "value",
    [
        b"{not json",
        b'{"v": 2, "status": "COMPLETED", "seq": 3, "ended_at": "2026-12-06T00:00:00Z"}',
        b'{"v": 1, "status": "RUNNING", "seq": 3, "ended_at": "2026-12-06T00:00:00Z"}',
        b'{"v": 1, "status": "COMPLETED", "seq": 3, "ended_at": "yesterday"}',
    ],
    ids=["not-json", "newer-version", "not-ended", "bad-time"],
)
def test_an_unreadable_header_is_refused_not_guessed_at(value: bytes) -> None:
    with pytest.raises(SchemaError, match=ENDED_HEADER):
        read_ended_header([(ENDED_HEADER, value)])


def test_kept_states_decode_a_resting_state_once_and_keep_it_decoded() -> None:
    [st, *_] = [s for s in _ends() if s.status in WORKFLOW_TERMINAL]
    log = Changelog()
    _feed(log, snapshot(TOPICS, st, 0, set())[0])
    [k] = log.kept()
    states = KeptStates()
    states.keep(k)
    assert len(states) == 1 and states.resting == 1
    assert states.peek(st.workflow_id) is k  # what retention reads: no decode
    first = states.get(st.workflow_id)
    assert first is not None and _doc(first) == _doc(st)
    assert states.get(st.workflow_id) is first and states.decoded == 1 and states.resting == 0
    states.keep(k)  # a restore again: resting again
    assert states.resting == 1 and len(states) == 1
    states.update({st.workflow_id: first})  # a batch's new state replaces the resting one
    assert states.resting == 0 and states.peek(st.workflow_id) is first
    states.pop(st.workflow_id)
    assert len(states) == 0 and states.get(st.workflow_id) is None


def test_an_unreadable_resting_snapshot_raises_when_asked_for_and_stays_resting() -> None:
    """The decider dead-letters the input that asked (its ``SchemaError`` handler), with the
    reason, and later inputs meet the same refusal: nothing is half-decoded."""
    [st, *_] = [s for s in _ends() if s.status in WORKFLOW_TERMINAL]
    assert st.ended_at is not None
    states = KeptStates()
    states.keep(Resting(st.workflow_id, st.status, st.seq, st.ended_at, b"{broken", {}))
    for _ in range(2):
        with pytest.raises(SchemaError, match="unreadable decider snapshot"):
            states.get(st.workflow_id)
    assert states.resting == 1 and states.decoded == 0


def test_the_auditor_checks_an_ended_header_against_the_fold_of_the_history() -> None:
    """``replay --verify --against changelog``: a header that disagrees with the history (here
    a seq one short) is a mismatch, though the snapshot itself agrees."""
    events = history(NAMES[0])
    st = fold(events)
    assert st is not None and st.ended_at is not None and st.status in WORKFLOW_TERMINAL
    replayed = Replayed(states={st.workflow_id: st})
    settings = settings_with({})
    for seq, found in ((st.seq, []), (st.seq - 1, [("ending", "seq", st.seq, st.seq - 1)])):
        snaps = Snapshots(
            latest={st.workflow_id: st}, endings={st.workflow_id: (st.status, seq, st.ended_at)}
        )
        mismatches = verify_changelog(settings, replayed, {st.workflow_id}, snapshots=snaps)
        assert [(m.kind, m.field, m.log, m.store) for m in mismatches] == found
