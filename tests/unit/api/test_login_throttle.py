"""The log-in throttle's rule (``api.throttle``) over in-memory counts and a hand-moved clock:
per key at an address, per address, Retry-After from the window, and another address's
failures never blocking a right secret."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from es_sched.api.auth import Authenticator, Unauthenticated
from es_sched.api.services import Lazy
from es_sched.api.throttle import LoginThrottle, MemoryFailures, TooManyAttempts
from es_sched.settings import ApiSettings
from tests.unit.api.auth_support import SECRET, Clock, MemoryKeys, key

pytestmark = pytest.mark.unit
SETTINGS = ApiSettings(
    auth="on",
    jwt_secret=SECRET,
    login_key_failures=3,
    login_address_failures=5,
    login_window_s=60,
)
A, B = "10.0.0.1", "10.0.0.2"


@dataclass
class Throttled:
    """An authenticator with a throttle over in-memory counts, and one viewer key."""

    clock: Clock = field(default_factory=Clock)
    keys: MemoryKeys = field(default_factory=MemoryKeys)
    counts: MemoryFailures = field(default_factory=MemoryFailures)

    def __post_init__(self) -> None:
        throttle = LoginThrottle(SETTINGS, lambda: self.counts, self.clock)
        memory: Lazy[MemoryKeys] = Lazy(lambda: self.keys)
        self.auth = Authenticator(SETTINGS, memory, self.clock, throttle)  # type: ignore[arg-type]
        self.key_id, self.secret = key(self.keys, "viewer", self.clock)


def fail(auth: Authenticator, key_id: str, address: str, times: int) -> None:
    for _ in range(times):
        with pytest.raises(Unauthenticated):
            auth.log_in(key_id, "wrong", address)


def test_a_key_failing_at_an_address_is_refused_there_until_its_window_ends() -> None:
    t = Throttled()
    auth, clock, key_id, secret = t.auth, t.clock, t.key_id, t.secret
    fail(auth, key_id, A, 3)
    clock.now += 20
    with pytest.raises(TooManyAttempts) as refused:
        auth.log_in(key_id, secret, A)  # even the right secret: it is not even checked
    assert (refused.value.status, refused.value.headers) == (429, {"Retry-After": "40"})
    assert auth.log_in(key_id, secret, B)  # another address's failures block nothing here
    clock.now += 40
    assert auth.log_in(key_id, secret, A)  # the window ended


def test_an_address_failing_on_many_keys_is_refused_for_every_key() -> None:
    t = Throttled()
    auth, key_id, secret = t.auth, t.key_id, t.secret
    for n in range(5):
        fail(auth, f"unknown-{n}", A, 1)
    with pytest.raises(TooManyAttempts):
        auth.log_in(key_id, secret, A)
    assert auth.log_in(key_id, secret, B)


def test_a_success_clears_its_keys_count_at_that_address() -> None:
    t = Throttled()
    auth, counts, key_id, secret = t.auth, t.counts, t.key_id, t.secret
    fail(auth, key_id, A, 2)
    assert auth.log_in(key_id, secret, A)
    assert f"key {key_id} at {A}" not in counts.rows
    fail(auth, key_id, A, 2)  # two more: 2 of 3 again, not 4
    assert auth.log_in(key_id, secret, A)
    assert counts.rows[f"address {A}"][0] == 4  # the address's count is not cleared


def test_a_window_starts_anew_after_it_ends() -> None:
    t = Throttled()
    auth, clock, counts, key_id = t.auth, t.clock, t.counts, t.key_id
    fail(auth, key_id, A, 2)
    clock.now += 61
    fail(auth, key_id, A, 2)  # 1 and 2 of a new window: still answered 401
    assert counts.rows[f"key {key_id} at {A}"] == (2, counts.rows[f"address {A}"][1])
