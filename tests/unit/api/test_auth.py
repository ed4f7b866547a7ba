"""API keys and tokens (ADR 25): argon2id hashes, the role table, token issue, expiry,
tampering and revocation, without a database (an in-memory ``Keys``)."""

from __future__ import annotations

from datetime import UTC, datetime

import jwt
import pytest

from es_sched.api.auth import Unauthenticated
from es_sched.api.keys import hash_secret, new_key, secret_matches
from es_sched.api.roles import ROLES, grants
from es_sched.settings import ApiSettings
from tests.unit.api.auth_support import SECRET, Clock, MemoryKeys, authenticator, key


def test_secrets_are_stored_as_argon2id_hashes() -> None:
    stored, secret = new_key("viewer", "ci", "test", datetime.now(UTC))
    assert stored.secret_hash.startswith("$argon2id$")
    assert secret not in stored.secret_hash
    assert secret_matches(stored.secret_hash, secret)
    assert not secret_matches(stored.secret_hash, secret + "x")
    assert not secret_matches("not a hash", secret)
    assert hash_secret(secret) != stored.secret_hash  # salted


def test_an_unknown_role_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown role"):
        new_key("root", "", "test", datetime.now(UTC))


@pytest.mark.parametrize(
    ("held", "allowed"),
    [
        ("viewer", {"viewer"}),
        ("worker", {"worker"}),
        ("operator", {"viewer", "operator"}),
        ("admin", set(ROLES)),
    ],
)
def test_role_grants(held: str, allowed: set[str]) -> None:
    assert {needed for needed in ROLES if grants(held, needed)} == allowed


def test_a_token_speaks_for_its_key_until_it_expires() -> None:
    keys, clock = MemoryKeys(), Clock()
    auth = authenticator(keys, clock)
    key_id, secret = key(keys, "operator", clock)
    token = auth.issue(key_id, secret)
    assert (
        jwt.decode(
            token, SECRET, algorithms=["HS256"], options={"verify_exp": False, "verify_iat": False}
        )["sub"]
        == key_id
    )
    principal = auth.principal(token)
    assert (principal.name, principal.role) == (key_id, "operator")
    assert keys.keys[key_id].last_used_at is not None
    clock.now += 599
    assert auth.principal(token).name == key_id
    clock.now += 1
    with pytest.raises(Unauthenticated) as refused:
        auth.principal(token)
    assert refused.value.error == "EXPIRED_TOKEN"


def test_wrong_credentials_are_not_an_invalid_token() -> None:
    # INVALID_TOKEN from /api/token would make the SDK ask /api/token again, recursively.
    keys, clock = MemoryKeys(), Clock()
    auth = authenticator(keys, clock)
    key_id, secret = key(keys, "viewer", clock)
    for kid, sec in [(key_id, secret + "x"), ("00000000-0000-0000-0000-000000000000", secret)]:
        with pytest.raises(Unauthenticated) as refused:
            auth.issue(kid, sec)
        assert refused.value.error == "INVALID_CREDENTIALS"
        assert refused.value.status == 401


@pytest.mark.parametrize(
    "forge",
    [
        lambda claims: jwt.encode(claims, "another-secret-of-enough-length-000", "HS256"),
        lambda claims: jwt.encode(claims, SECRET, "HS512"),
        lambda claims: jwt.encode({k: v for k, v in claims.items() if k != "exp"}, SECRET),
        lambda claims: "not.a.jwt",
        lambda claims: jwt.encode(claims, None, "none"),
    ],
    ids=["other-secret", "other-algorithm", "no-expiry", "garbage", "alg-none"],
)
def test_forged_tokens_are_invalid(forge) -> None:  # type: ignore[no-untyped-def]
    keys, clock = MemoryKeys(), Clock()
    auth = authenticator(keys, clock)
    key_id, _ = key(keys, "admin", clock)
    claims = {"sub": key_id, "role": "admin", "iat": int(clock.now), "exp": int(clock.now) + 60}
    with pytest.raises(Unauthenticated) as refused:
        auth.principal(forge(claims))
    assert refused.value.error == "INVALID_TOKEN"


def test_a_revoked_keys_tokens_stop_within_the_cache_period() -> None:
    keys, clock = MemoryKeys(), Clock()
    auth = authenticator(keys, clock, cache_s=5)
    key_id, secret = key(keys, "viewer", clock)
    token = auth.issue(key_id, secret)
    assert auth.principal(token).name == key_id
    keys.revoke(key_id, datetime.now(UTC))
    clock.now += 5
    with pytest.raises(Unauthenticated) as refused:
        auth.principal(token)
    assert refused.value.error == "INVALID_TOKEN"
    with pytest.raises(Unauthenticated, match="revoked"):
        auth.issue(key_id, secret)


def test_keys_are_read_once_per_cache_period() -> None:
    keys, clock = MemoryKeys(), Clock()
    auth = authenticator(keys, clock, cache_s=5)
    key_id, secret = key(keys, "viewer", clock)
    token = auth.issue(key_id, secret)
    before = keys.reads
    for _ in range(10):
        auth.principal(token)
    assert keys.reads == before + 1


def test_a_check_answers_offline_exactly_when_it_would_not_read_the_keys() -> None:
    """The dependency answers on the event loop when ``answers_offline``; otherwise on a
    thread, because ``principal`` will read the key store."""
    keys, clock = MemoryKeys(), Clock()
    auth = authenticator(keys, clock, cache_s=5)
    key_id, secret = key(keys, "viewer", clock)
    token = auth.issue(key_id, secret)
    assert not auth.answers_offline(token)  # never read: principal() reads the store
    before = keys.reads
    auth.principal(token)
    assert keys.reads == before + 1 and auth.answers_offline(token)
    auth.principal(token)
    assert keys.reads == before + 1  # offline, as it said
    clock.now += 5
    assert not auth.answers_offline(token)  # the cached read is too old
    assert auth.answers_offline("not-a-jwt")  # refused before any read
    with pytest.raises(Unauthenticated):
        auth.principal("not-a-jwt")
    assert keys.reads == before + 1


def test_without_a_configured_secret_each_process_has_its_own() -> None:
    keys, clock = MemoryKeys(), Clock()
    one, other = authenticator(keys, clock, ""), authenticator(keys, clock, "")
    key_id, secret = key(keys, "viewer", clock)
    with pytest.raises(Unauthenticated):
        other.principal(one.issue(key_id, secret))


def test_a_short_jwt_secret_is_refused() -> None:
    with pytest.raises(ValueError, match="32 bytes"):
        ApiSettings(jwt_secret="short")
    assert ApiSettings(jwt_secret="").jwt_secret == ""
