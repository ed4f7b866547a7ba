"""Lease tokens sealed to their worker's key (ADR 74), without a broker: only the key the
token was sealed to opens it; anything else is refused with a ``SealError``."""

from __future__ import annotations

import base64
import dataclasses

import pytest

from es_sched.errors import SchemaError
from es_sched.serialization import sealed, wire

TOKEN = "9f86d081884c7d659a2feaa0c55ad015"


def assignment(token: str) -> wire.Assignment:
    return wire.Assignment("w1", "wf", "t1", "enc", 1, 3, token, "2999-01-01T00:00:00Z", {})


def test_only_the_worker_whose_key_sealed_the_token_opens_it() -> None:
    victim, thief = sealed.LeaseKey(), sealed.LeaseKey()
    text = sealed.seal(TOKEN, sealed.public_key(victim.public))
    assert sealed.is_sealed(text) and TOKEN not in text
    assert victim.open(text) == TOKEN
    with pytest.raises(sealed.SealError, match="sealed to another key") as refused:
        thief.open(text)
    assert isinstance(refused.value, SchemaError)  # a record this process cannot use
    # each seal has its own ephemeral key: two seals of one token differ
    assert sealed.seal(TOKEN, sealed.public_key(victim.public)) != text


def test_an_assignment_opened_carries_the_clear_token_and_a_clear_one_passes() -> None:
    key = sealed.LeaseKey()
    a = assignment(sealed.seal(TOKEN, sealed.public_key(key.public)))
    assert sealed.opened(a, key) == dataclasses.replace(a, lease_token=TOKEN)
    clear = assignment(TOKEN)  # ES_SCHED_DISPATCH_CLEAR_LEASE_TOKENS: nothing to open
    assert sealed.opened(clear, key) is clear
    with pytest.raises(sealed.SealError):
        sealed.opened(a, sealed.LeaseKey())


@pytest.mark.parametrize(
    "garbled",
    [
        sealed.SEALED + "not base64!",
        sealed.SEALED + base64.b64encode(b"x" * 80).decode(),  # the right size, not a box
        sealed.SEALED,
    ],
)
def test_a_garbled_sealed_token_is_refused(garbled: str) -> None:
    with pytest.raises(sealed.SealError):
        sealed.LeaseKey().open(garbled)


@pytest.mark.parametrize(
    "text", ["", "!!!!", base64.b64encode(b"short").decode(), base64.b64encode(b"k" * 33).decode()]
)
def test_a_published_key_that_is_no_x25519_key_is_refused(text: str) -> None:
    with pytest.raises(sealed.SealError):
        sealed.public_key(text)


def test_the_private_half_is_never_shown() -> None:
    key = sealed.LeaseKey()
    private = base64.b64encode(bytes(key._private)).decode()
    assert key.public in repr(key) and private not in repr(key)
    assert private not in str(vars(key))  # what a careless log of the object would print
