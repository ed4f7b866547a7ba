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
    dispatcher, victim, thief = sealed.Sealer(), sealed.LeaseKey(), sealed.LeaseKey()
    text = dispatcher.seal(TOKEN, victim.public)
    assert sealed.is_sealed(text) and TOKEN not in text and dispatcher.public in text
    assert victim.open(text) == TOKEN
    with pytest.raises(sealed.SealError, match="sealed to another key") as refused:
        thief.open(text)
    assert isinstance(refused.value, SchemaError)  # a record this process cannot use
    # a nonce per seal: two seals of one token differ, both open
    again = dispatcher.seal(TOKEN, victim.public)
    assert again != text and victim.open(again) == TOKEN
    # a restarted dispatcher (a new key) seals to the same worker key; the worker opens both
    assert victim.open(sealed.Sealer().seal(TOKEN, victim.public)) == TOKEN


def test_a_thief_cannot_pass_off_its_own_box_as_the_dispatchers() -> None:
    """A token sealed by a worker's key to the victim is no dispatcher's: the victim opens it
    (boxes are symmetric), yet the decider still refuses it, as its token is not the lease's.
    What a thief cannot do is read the dispatcher's: shown above."""
    victim, thief = sealed.LeaseKey(), sealed.LeaseKey()
    as_dispatcher = sealed.Sealer(thief._private)
    assert as_dispatcher.public == thief.public
    assert victim.open(as_dispatcher.seal("guess", victim.public)) == "guess"


def test_an_assignment_opened_carries_the_clear_token_and_a_clear_one_passes() -> None:
    key = sealed.LeaseKey()
    a = assignment(sealed.Sealer().seal(TOKEN, key.public))
    assert sealed.opened(a, key) == dataclasses.replace(a, lease_token=TOKEN)
    clear = assignment(TOKEN)  # ES_SCHED_DISPATCH_CLEAR_LEASE_TOKENS: nothing to open
    assert sealed.opened(clear, key) is clear
    with pytest.raises(sealed.SealError):
        sealed.opened(a, sealed.LeaseKey())


@pytest.mark.parametrize(
    "garbled",
    [
        sealed.SEALED + "not base64!",
        f"{sealed.SEALED}{sealed.Sealer().public}:{base64.b64encode(b'x' * 72).decode()}",
        f"{sealed.SEALED}{sealed.Sealer().public}:not base64!",
        f"{sealed.SEALED}short:{base64.b64encode(b'x' * 72).decode()}",
        sealed.SEALED,
    ],
    ids=["no-sender", "not-a-box", "box-not-base64", "sender-not-a-key", "empty"],
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


@pytest.mark.parametrize("make", [sealed.LeaseKey, sealed.Sealer])
def test_the_private_half_is_never_shown(make: type[sealed.LeaseKey | sealed.Sealer]) -> None:
    key = make()
    private = base64.b64encode(bytes(key._private)).decode()
    assert key.public in repr(key) and private not in repr(key)
    assert private not in str(vars(key))  # what a careless log of the object would print
