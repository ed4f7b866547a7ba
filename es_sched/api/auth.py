"""Who is calling, and may they (issue 14 item 3, ADR 25).

Routes declare the least role they need with ``Depends(require("operator"))`` and get the
``Principal`` back, whose ``name`` every command they send carries. Roles: ``viewer`` reads,
``worker`` polls and updates tasks, ``operator`` acts on workflows (and reads), ``admin``
does everything (definitions, config, keys); the table is ``roles.GRANTS``.

A caller proves who it is with a JWT that ``POST /api/token`` issued for an API key (Conductor's
token protocol, so its SDKs work unchanged): in ``X-Authorization`` (the SDKs), ``Authorization:
Bearer`` (the native API's clients) or the console's cookie. Tokens are HS256 with
``ES_SCHED_API_JWT_SECRET`` and live ``ES_SCHED_API_TOKEN_TTL_S``; each request also checks the
key is still there and not revoked, through a cache of ``ES_SCHED_API_KEY_CACHE_S`` seconds.
A missing or bad token is a 401 whose ``error`` is ``INVALID_TOKEN`` or ``EXPIRED_TOKEN`` (the
SDK fetches a new token on either and retries once); a role that does not grant the route is a
403 in Conductor's error body. The console's pages redirect to ``/ui/login`` instead.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

import jwt
from fastapi import Depends, Request
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException

from es_sched.api.errors import ApiError
from es_sched.api.keys import Keys, StoredKey, secret_matches
from es_sched.api.roles import ROLES, grants
from es_sched.api.services import Lazy, Services, services
from es_sched.api.throttle import LoginThrottle
from es_sched.settings import ApiSettings

__all__ = [
    "ROLES",
    "Authenticator",
    "Principal",
    "Unauthenticated",
    "admitted",
    "authenticated",
    "peer",
    "require",
]

COOKIE = "es_sched_token"
ALGORITHM = "HS256"
CHECKS: Any = {"require": ["sub", "role", "exp"], "verify_exp": False, "verify_iat": False}


@dataclass(frozen=True)
class Principal:
    name: str  # the key id, or "anonymous" with auth off
    role: str


ANONYMOUS = Principal("anonymous", "admin")


class Unauthenticated(ApiError):
    """A 401; ``error`` is the token protocol's word for it, which the SDKs act on."""

    def __init__(self, error: str, message: str) -> None:
        super().__init__(401, message, error=error)


class Authenticator:
    """Issues and checks tokens for the keys in ``keys`` (one per API process)."""

    def __init__(
        self,
        settings: ApiSettings,
        keys: Lazy[Keys],
        clock: Callable[[], float] = time.time,
        throttle: LoginThrottle | None = None,
    ) -> None:
        # No secret configured: a random one, so tokens die with the process (one process).
        self._secret = settings.jwt_secret.encode() or secrets.token_bytes(32)
        self._ttl_s = settings.token_ttl_s
        self._cache_s = settings.key_cache_s
        self._keys = keys
        self._clock = clock
        self._seen: dict[str, tuple[float, StoredKey | None]] = {}
        self._lock = threading.Lock()
        self._throttle = throttle

    def log_in(self, key_id: str, key_secret: str, address: str) -> str:
        """``issue`` for a caller at ``address`` (``POST /api/token``, the console's log-in),
        throttled when a throttle is given: 429 ``TooManyAttempts`` before the secret is
        checked, once this key at this address or this address failed too often."""
        if self._throttle is None:
            return self.issue(key_id, key_secret)
        self._throttle.check(key_id, address)
        try:
            token = self.issue(key_id, key_secret)
        except Unauthenticated:
            self._throttle.failed(key_id, address)
            raise
        self._throttle.succeeded(key_id, address)
        return token

    def issue(self, key_id: str, key_secret: str) -> str:
        """A token for a live key whose secret matches; 401 ``INVALID_CREDENTIALS`` otherwise
        (not ``INVALID_TOKEN``: the SDK would answer that by asking for a token again)."""
        key = self._keys.get().get(key_id)
        if (
            key is None
            or key.revoked_at is not None
            or not secret_matches(key.secret_hash, key_secret)
        ):
            raise Unauthenticated("INVALID_CREDENTIALS", "unknown or revoked key, or wrong secret")
        now = int(self._clock())
        self._keys.get().touch(key_id, _utc(now))
        claims = {
            "sub": key.key_id,
            "role": key.role,
            "iat": now,
            "exp": now + self._ttl_s,
            "jti": secrets.token_hex(8),  # two tokens of one key in one second still differ
        }
        return jwt.encode(claims, self._secret, algorithm=ALGORITHM)

    def principal(self, token: str) -> Principal:
        """Who ``token`` speaks for, or ``Unauthenticated``."""
        # ``exp`` is checked here against the injected clock (PyJWT would read the wall clock);
        # ``iat`` is only a record.
        try:
            claims = jwt.decode(token, self._secret, algorithms=[ALGORITHM], options=CHECKS)
            expires = float(claims["exp"])
        except (jwt.PyJWTError, TypeError, ValueError) as exc:
            raise Unauthenticated("INVALID_TOKEN", f"invalid token: {exc}") from None
        if expires <= self._clock():
            raise Unauthenticated("EXPIRED_TOKEN", "the token has expired; ask /api/token again")
        key = self._key(str(claims["sub"]))
        if key is None or key.revoked_at is not None:
            raise Unauthenticated("INVALID_TOKEN", "the token's key is revoked or unknown")
        return Principal(key.key_id, key.role)

    def answers_offline(self, token: str) -> bool:
        """Whether ``principal(token)`` would answer without reading the key store: the token
        is invalid or expired, or its key was read less than ``key_cache_s`` ago."""
        try:
            claims = jwt.decode(token, self._secret, algorithms=[ALGORITHM], options=CHECKS)
            key_id = str(claims["sub"])
        except (jwt.PyJWTError, TypeError, ValueError, KeyError):
            return True
        with self._lock:
            seen = self._seen.get(key_id)
        return seen is not None and self._clock() - seen[0] < self._cache_s

    def _key(self, key_id: str) -> StoredKey | None:
        """The key as read at most ``key_cache_s`` ago; each read also records its use."""
        now = self._clock()
        with self._lock:
            seen = self._seen.get(key_id)
        if seen is not None and now - seen[0] < self._cache_s:
            return seen[1]
        key = self._keys.get().get(key_id)
        if key is not None and key.revoked_at is None:
            self._keys.get().touch(key_id, _utc(int(now)))
        with self._lock:
            self._seen[key_id] = (now, key)
        return key

    @property
    def keys(self) -> Keys:
        return self._keys.get()

    def close(self) -> None:
        if self._keys.built:
            self._keys.get().close()


def _utc(seconds: int) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


def peer(request: Request) -> str:
    """The address a log-in is counted against: the TCP peer (``api.throttle`` says why no
    forwarded header)."""
    return request.client.host if request.client else "unknown"


def token_of(request: Request) -> str | None:
    """The token the caller sent: ``X-Authorization``, ``Authorization: Bearer``, the cookie."""
    header = request.headers.get("x-authorization")
    if header:
        return header.removeprefix("Bearer ").strip()
    bearer = request.headers.get("authorization", "")
    if bearer[:7].lower() == "bearer ":
        return bearer[7:].strip()
    return request.cookies.get(COOKIE)


def authenticator(svc: Services) -> Authenticator:
    if svc.auth is None:
        raise LookupError("no authenticator: es_sched.bootstrap.api_services sets Services.auth")
    return svc.auth


def require(role: str) -> Any:
    """A dependency admitting callers whose role grants ``role``."""
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}")

    async def check(request: Request, svc: Services = Depends(services)) -> Principal:  # noqa: B008
        if _offline(request, svc):
            return admitted(request, svc, role)
        return await run_in_threadpool(admitted, request, svc, role)

    dependency: Callable[..., Awaitable[Principal]] = check
    return Depends(dependency)


def admitted(request: Request, svc: Services, role: str) -> Principal:
    """The caller, if its role grants ``role``: 401 or 403 (``ApiError``) otherwise."""
    principal = _caller(request, svc)
    if not grants(principal.role, role):
        raise ApiError(
            403, f"key {principal.name} has role {principal.role}, which does not grant {role}"
        )
    return principal


def authenticated() -> Any:
    """A dependency admitting any caller with a valid token, whatever its role."""

    async def check(request: Request, svc: Services = Depends(services)) -> Principal:  # noqa: B008
        if _offline(request, svc):
            return _caller(request, svc)
        return await run_in_threadpool(_caller, request, svc)

    dependency: Callable[..., Awaitable[Principal]] = check
    return Depends(dependency)


def _offline(request: Request, svc: Services) -> bool:
    """Whether deciding who calls needs no store read, so the dependency may answer on the
    event loop (a thread-pool hop per request cost more than the check itself): auth off, or
    a token whose key was read less than ``key_cache_s`` ago (or that fails before any read)."""
    if svc.settings.api.auth == "off":
        return True
    token = token_of(request)
    return not token or authenticator(svc).answers_offline(token)


def _caller(request: Request, svc: Services) -> Principal:
    principal = ANONYMOUS if svc.settings.api.auth == "off" else _authenticated(request, svc)
    request.state.principal = principal  # for the console's header
    return principal


def _authenticated(request: Request, svc: Services) -> Principal:
    token = token_of(request)
    try:
        if not token:
            raise Unauthenticated("INVALID_TOKEN", "no token; send X-Authorization (/api/token)")
        return authenticator(svc).principal(token)
    except Unauthenticated:
        if not request.url.path.startswith("/ui"):
            raise
        back = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        login = f"/ui/login?next={quote(back, safe='')}"
        if request.headers.get("hx-request"):  # htmx follows redirects inside a fragment
            raise HTTPException(401, "log in", headers={"HX-Redirect": login}) from None
        raise HTTPException(303, "log in", headers={"Location": login}) from None
