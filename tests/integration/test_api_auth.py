"""Auth on a running ``es-sched api`` (ADR 25): keys made with the CLI, Conductor's token
protocol over HTTP, and the real conductor-python SDK authenticating with a key id and secret,
renewing an expired token by itself, and stopping when its key is revoked."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import jwt
import pytest
from conductor.client.configuration.configuration import Configuration
from conductor.client.configuration.settings.authentication_settings import (
    AuthenticationSettings,
)
from conductor.client.http.api.token_resource_api import TokenResourceApi
from conductor.client.http.api_client import ApiClient
from conductor.client.http.rest import AuthorizationException

from testkit.api import Api, api, keyed_env
from testkit.runtime import Env

pytestmark = pytest.mark.integration

SECRET = "integration-test-jwt-secret-0123456789"
AUTH = {"ES_SCHED_API_AUTH": "on", "ES_SCHED_API_JWT_SECRET": SECRET}


@pytest.fixture(scope="module")
def env() -> Iterator[Env]:
    with keyed_env() as env:
        yield env


@pytest.fixture(scope="module")
def server(env: Env) -> Iterator[Api]:
    # A cache of 0 s: every request reads its key, so a revocation shows at once (no waiting).
    with api(env, **AUTH, ES_SCHED_API_KEY_CACHE_S="0") as running:
        yield running


def create_key(env: Env, role: str) -> tuple[str, str]:
    made = json.loads(env.cli("api", "keys", "create", "--role", role, "--json"))
    assert made["role"] == role
    return made["keyId"], made["keySecret"]


def token(server: Api, key_id: str, secret: str) -> str:
    answer = server.http.post("/api/token", json={"keyId": key_id, "keySecret": secret})
    assert answer.status_code == 200, answer.text
    found: str = answer.json()["token"]
    return found


def test_cli_keys_and_the_token_protocol(env: Env, server: Api) -> None:
    key_id, secret = create_key(env, "operator")
    admin = {"X-Authorization": token(server, *create_key(env, "admin"))}
    listed = json.loads(env.cli("api", "keys", "list", "--json"))
    mine = next(row for row in listed if row["key_id"] == key_id)
    assert mine["role"] == "operator"
    assert mine["created_by"].startswith("cli")
    assert "secret" not in json.dumps(listed).lower().replace("key_secret", "")

    jwt_ = token(server, key_id, secret)
    me = server.http.get("/api/token/userInfo", headers={"X-Authorization": jwt_})
    assert me.json()["id"] == key_id
    bearer = server.http.get("/api/token/userInfo", headers={"Authorization": f"Bearer {jwt_}"})
    assert bearer.status_code == 200
    used = {row["key_id"]: row for row in server.http.get("/api/v1/keys", headers=admin).json()}
    assert used[key_id]["last_used_at"] is not None

    insufficient = server.http.get("/api/v1/keys", headers={"X-Authorization": jwt_})
    assert insufficient.status_code == 403
    assert insufficient.json()["code"] == "FORBIDDEN"
    assert "operator" in insufficient.json()["message"]

    now = int(time.time())
    claims = {"sub": key_id, "role": "operator", "iat": now - 120, "exp": now - 60}
    expired = jwt.encode(claims, SECRET, algorithm="HS256")
    answer = server.http.get("/api/token/userInfo", headers={"X-Authorization": expired})
    assert (answer.status_code, answer.json()["error"]) == (401, "EXPIRED_TOKEN")
    forged = jwt.encode(
        {**claims, "exp": now + 600}, "not-the-secret-but-long-enough-000000", "HS256"
    )
    answer = server.http.get("/api/token/userInfo", headers={"X-Authorization": forged})
    assert (answer.status_code, answer.json()["error"]) == (401, "INVALID_TOKEN")
    absent = server.http.get("/api/v1/keys")
    assert (absent.status_code, absent.json()["error"]) == (401, "INVALID_TOKEN")
    wrong = server.http.post("/api/token", json={"keyId": key_id, "keySecret": secret + "x"})
    assert (wrong.status_code, wrong.json()["error"]) == (401, "INVALID_CREDENTIALS")

    assert f"revoked {key_id}" in env.cli("api", "keys", "revoke", key_id)
    revoked = server.http.get("/api/token/userInfo", headers={"X-Authorization": jwt_})
    assert (revoked.status_code, revoked.json()["error"]) == (401, "INVALID_TOKEN")
    again = server.http.post("/api/token", json={"keyId": key_id, "keySecret": secret})
    assert again.status_code == 401


def sdk(server: Api, key_id: str, secret: str) -> tuple[Configuration, TokenResourceApi]:
    config = Configuration(
        server_api_url=f"{server.url}/api",
        authentication_settings=AuthenticationSettings(key_id=key_id, key_secret=secret),
    )
    return config, TokenResourceApi(ApiClient(config))


def test_the_conductor_sdk_authenticates_renews_and_is_cut_off(env: Env, server: Api) -> None:
    key_id, secret = create_key(env, "worker")
    config, tokens = sdk(server, key_id, secret)
    first = config.AUTH_TOKEN
    assert first, "the SDK got no token from POST /api/token"
    assert tokens.get_user_info()["id"] == key_id
    print(f"conductor-python {key_id}: userInfo {tokens.get_user_info()}")

    # An expired token in the SDK's hands: the server says EXPIRED_TOKEN, the SDK asks
    # /api/token for a new one and retries the call, which then succeeds.
    now = int(time.time())
    stale = {"sub": key_id, "role": "worker", "iat": now - 120, "exp": now - 60}
    config.update_token(jwt.encode(stale, SECRET, algorithm="HS256"))
    assert tokens.get_user_info()["id"] == key_id
    assert config.AUTH_TOKEN not in (first, None)
    assert jwt.decode(config.AUTH_TOKEN, SECRET, algorithms=["HS256"])["sub"] == key_id

    env.cli("api", "keys", "revoke", key_id)
    with pytest.raises(AuthorizationException) as refused:
        tokens.get_user_info()
    assert refused.value.status == 401


def test_the_sdk_with_a_wrong_secret_fails_cleanly(env: Env, server: Api) -> None:
    key_id, secret = create_key(env, "viewer")
    config, tokens = sdk(server, key_id, secret + "x")
    assert config.AUTH_TOKEN is None
    with pytest.raises(AuthorizationException) as refused:
        tokens.get_user_info()  # no endless /api/token loop: INVALID_CREDENTIALS ends it
    assert refused.value.status == 401
