"""The dispatcher's book of workers' lease keys (ADR 74), pure: a new key is believed only
once the held one has been silent long enough; another key while it is live is contested."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from es_sched.dispatch.core.lease_keys import Heard, LeaseKeys

T0 = datetime(2026, 5, 1, 9, 0, tzinfo=UTC)


def at(s: float) -> datetime:
    return T0 + timedelta(seconds=s)


def test_a_new_key_is_believed_only_after_the_held_one_fell_silent() -> None:
    book = LeaseKeys(silence_s=10)
    assert book.hear("w1", "K1", at(0)) is Heard.NEW
    assert book.hear("w1", "K1", at(5)) is Heard.SAME
    assert book.hear("w1", "K2", at(14)) is Heard.CONTESTED  # K1 heard 9 s before
    assert book.keys["w1"] == "K1" and book.heard["w1"] == at(5)
    assert book.hear("w1", "", at(14)) is Heard.CONTESTED  # dropping the key is a change too
    assert book.hear("w1", "K2", at(15)) is Heard.CHANGED
    assert book.keys["w1"] == "K2" and book.heard["w1"] == at(15)
    assert book.hear("w1", "K1", at(16)) is Heard.CONTESTED  # the old process again: no flap


def test_an_older_report_of_the_held_key_does_not_move_its_time_back() -> None:
    book = LeaseKeys(silence_s=10)
    book.hear("w1", "K1", at(8))
    assert book.hear("w1", "K1", at(3)) is Heard.SAME and book.heard["w1"] == at(8)


def test_a_forgotten_or_silent_key() -> None:
    book = LeaseKeys(silence_s=10)
    book.hear("w1", "K1", at(0))
    book.hear("w2", "K2", at(50))
    assert book.silent(at(61), 60) == ["w1"]
    assert book.forget("w1") == "K1" and book.forget("w1") is None
    assert book.hear("w1", "K3", at(62)) is Heard.NEW  # heard anew: no change to believe
