"""Auth at the HTTP edge (ADR 25): Conductor's token protocol, the three ways to send a token,
401 bodies the SDK acts on, 403 in Conductor's error body, the console's log-in cookie."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import pytest
from fastapi.testclient import TestClient

from tests.unit.api.auth_support import Clock, MemoryKeys, app, key


@pytest.fixture
def setup() -> tuple[TestClient, MemoryKeys, Clock]:
    keys, clock = MemoryKeys(), Clock()
    return TestClient(app(keys, clock), follow_redirects=False), keys, clock


def token(client: TestClient, key_id: str, secret: str) -> str:
    answer = client.post("/api/token", json={"keyId": key_id, "keySecret": secret})
    assert answer.status_code == 200, answer.text
    found: str = answer.json()["token"]
    return found


def test_token_protocol_and_each_way_to_send_it(setup) -> None:  # type: ignore[no-untyped-def]
    client, keys, clock = setup
    key_id, secret = key(keys, "viewer", clock)
    jwt = token(client, key_id, secret)
    for headers in ({"X-Authorization": jwt}, {"Authorization": f"Bearer {jwt}"}):
        answer = client.get("/api/probe", headers=headers)
        assert answer.status_code == 200
        assert answer.json() == {"name": key_id, "role": "viewer"}
    client.cookies.set("es_sched_token", jwt)
    assert client.get("/api/probe").status_code == 200


@pytest.mark.parametrize(
    ("headers", "error"),
    [({}, "INVALID_TOKEN"), ({"X-Authorization": "junk"}, "INVALID_TOKEN")],
)
def test_missing_or_bad_tokens_answer_401_with_the_sdks_error(setup, headers, error) -> None:  # type: ignore[no-untyped-def]
    client, _, _ = setup
    answer = client.get("/api/probe", headers=headers)
    assert answer.status_code == 401
    assert answer.json()["error"] == error
    assert answer.json()["message"]


def test_an_expired_token_answers_expired(setup) -> None:  # type: ignore[no-untyped-def]
    client, keys, clock = setup
    key_id, secret = key(keys, "viewer", clock)
    jwt = token(client, key_id, secret)
    clock.now += 601
    answer = client.get("/api/probe", headers={"X-Authorization": jwt})
    assert (answer.status_code, answer.json()["error"]) == (401, "EXPIRED_TOKEN")


def test_wrong_credentials_and_strict_request_bodies(setup) -> None:  # type: ignore[no-untyped-def]
    client, keys, clock = setup
    key_id, secret = key(keys, "viewer", clock)
    wrong = client.post("/api/token", json={"keyId": key_id, "keySecret": "nope"})
    assert (wrong.status_code, wrong.json()["error"]) == (401, "INVALID_CREDENTIALS")
    extra = client.post("/api/token", json={"keyId": key_id, "keySecret": secret, "x": 1})
    assert extra.status_code == 400
    assert "x" in extra.json()["message"]


@pytest.mark.parametrize(
    ("role", "route", "status"),
    [
        ("viewer", "/api/probe-operator", 403),
        ("worker", "/api/probe-operator", 403),
        ("operator", "/api/probe-operator", 200),
        ("operator", "/api/probe-worker", 403),
        ("worker", "/api/probe-worker", 200),
        ("admin", "/api/probe-worker", 200),
    ],
)
def test_roles_are_enforced_with_conductors_error_body(setup, role, route, status) -> None:  # type: ignore[no-untyped-def]
    client, keys, clock = setup
    jwt = token(client, *key(keys, role, clock))
    answer = client.post(route, headers={"X-Authorization": jwt})
    assert answer.status_code == status
    if status == 403:
        body = answer.json()
        assert (body["status"], body["code"]) == (403, "FORBIDDEN")
        assert role in body["message"]
        assert "error" not in body  # a 403 is not a token problem: the SDK must not refresh


def test_user_info_answers_for_any_role(setup) -> None:  # type: ignore[no-untyped-def]
    client, keys, clock = setup
    key_id, secret = key(keys, "worker", clock)
    answer = client.get(
        "/api/token/userInfo", headers={"X-Authorization": token(client, key_id, secret)}
    )
    assert answer.json()["id"] == key_id
    assert answer.json()["roles"] == [{"name": "worker"}]


def test_auth_off_is_anonymous_admin_and_has_no_token_endpoint() -> None:
    client = TestClient(app(MemoryKeys(), Clock(), auth="off"))
    assert client.post("/api/probe-worker").json() == {"name": "anonymous"}
    assert client.get("/api/token/userInfo").json()["roles"] == [{"name": "admin"}]
    # The SDK reads a 404 from /api/token as "no authentication on this server".
    assert client.post("/api/token", json={"keyId": "a", "keySecret": "b"}).status_code == 404


def test_console_pages_redirect_to_the_login_and_the_cookie_logs_in(setup) -> None:  # type: ignore[no-untyped-def]
    client, keys, clock = setup
    away = client.get("/ui/probe?x=1")
    assert away.status_code == 303
    target = urlsplit(away.headers["location"])
    assert target.path == "/ui/login"
    assert parse_qs(target.query)["next"] == ["/ui/probe?x=1"]
    fragment = client.get("/ui/probe", headers={"HX-Request": "true"})
    assert fragment.headers["HX-Redirect"].startswith("/ui/login")
    assert "Key secret" in client.get("/ui/login").text

    key_id, secret = key(keys, "viewer", clock)
    bad = client.post("/ui/login", data={"keyId": key_id, "keySecret": "no", "next": "/ui/probe"})
    assert bad.status_code == 401
    assert "es_sched_token" not in bad.headers.get("set-cookie", "")
    good = client.post(
        "/ui/login", data={"keyId": key_id, "keySecret": secret, "next": "/ui/probe"}
    )
    assert (good.status_code, good.headers["location"]) == (303, "/ui/probe")
    cookie = good.headers["set-cookie"]
    assert "HttpOnly" in cookie
    assert "SameSite=strict" in cookie or "SameSite=Strict" in cookie
    assert client.get("/ui/probe").json() == {"name": key_id}


@pytest.mark.parametrize(
    "next_", ["https://evil.example/", "//evil.example/ui/", "/api/x", "/ui\\@x"]
)
def test_login_never_redirects_off_the_console(setup, next_) -> None:  # type: ignore[no-untyped-def]
    client, keys, clock = setup
    key_id, secret = key(keys, "viewer", clock)
    answer = client.post("/ui/login", data={"keyId": key_id, "keySecret": secret, "next": next_})
    assert answer.headers["location"] == "/ui/"


def test_admins_list_and_revoke_keys_others_may_not(setup) -> None:  # type: ignore[no-untyped-def]
    client, keys, clock = setup
    admin = {"X-Authorization": token(client, *key(keys, "admin", clock))}
    operator = {"X-Authorization": token(client, *key(keys, "operator", clock))}
    victim, _ = key(keys, "viewer", clock)
    assert client.get("/api/v1/keys", headers=operator).status_code == 403
    assert client.delete(f"/api/v1/keys/{victim}", headers=operator).status_code == 403
    listed = client.get("/api/v1/keys", headers=admin).json()
    assert {row["key_id"] for row in listed} == set(keys.keys)
    assert all("secret_hash" not in row for row in listed)
    assert client.delete(f"/api/v1/keys/{victim}", headers=admin).json() == {"revoked": victim}
    assert keys.keys[victim].revoked_at is not None
    missing = client.delete("/api/v1/keys/nope", headers=admin)
    assert (missing.status_code, missing.json()["code"]) == (404, "NOT_FOUND")
