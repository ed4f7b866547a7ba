"""Conductor's token protocol, ``POST /api/token``, and the admin's view of the keys
(``/api/v1/keys``; issue 14 item 3, ADR 25).

The conductor-python SDK, given ``AuthenticationSettings(key_id, key_secret)``, posts
``{"keyId", "keySecret"}`` here, reads ``{"token"}`` and sends it as ``X-Authorization`` on
every call; on a 401 whose ``error`` is ``EXPIRED_TOKEN`` or ``INVALID_TOKEN`` it posts again
and retries once. Wrong credentials answer 401 ``INVALID_CREDENTIALS``: were it
``INVALID_TOKEN``, the SDK would answer by asking for a token again, from inside the same call.
With ``ES_SCHED_API_AUTH=off`` there is no token to get: 404, which the SDK reads as "this
server runs without authentication" (as Conductor OSS does).
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, ConfigDict, Field

from es_sched.api.auth import Principal, authenticated, authenticator, peer, require
from es_sched.api.errors import ApiError
from es_sched.api.keys import utcnow
from es_sched.api.services import Services, services

router = APIRouter(prefix="/api", tags=["token"])
log = logging.getLogger(__name__)


class GenerateTokenRequest(BaseModel):
    """Conductor's ``GenerateTokenRequest``."""

    model_config = ConfigDict(extra="forbid")

    keyId: str = Field(min_length=1, max_length=100)
    keySecret: str = Field(min_length=1, max_length=200)


class Token(BaseModel):
    token: str


UNAUTHORIZED: dict[int | str, dict[str, Any]] = {
    401: {"description": "Wrong credentials: `{error: INVALID_CREDENTIALS, message}`"},
    404: {"description": "Authentication is off on this server"},
    429: {"description": "Too many failed attempts from this address; see `Retry-After`"},
}
CALLER: dict[int | str, dict[str, Any]] = {
    401: {"description": "No valid token: `{error: INVALID_TOKEN|EXPIRED_TOKEN, message}`"}
}


@router.post("/token", response_model=Token, responses=UNAUTHORIZED)
def generate_token(
    request: GenerateTokenRequest,
    http: Request,
    svc: Services = Depends(services),  # noqa: B008
) -> Token:
    """A JWT for an API key, to send as ``X-Authorization`` (or ``Authorization: Bearer``);
    throttled per key and per address (``api.throttle``)."""
    if svc.settings.api.auth == "off":
        raise ApiError(404, "authentication is off on this server; no token is needed")
    token = authenticator(svc).log_in(request.keyId, request.keySecret, peer(http))
    return Token(token=token)


class Role(BaseModel):
    name: str


class UserInfo(BaseModel):
    """What Orkes's ``GET /api/token/userInfo`` answers, for the caller's key."""

    id: str
    name: str
    roles: list[Role]
    applicationUser: bool = True


@router.get("/token/userInfo", response_model=UserInfo, responses=CALLER)
def user_info(principal: Principal = authenticated()) -> UserInfo:  # noqa: B008
    """Who the token speaks for (any role): the SDKs' ``TokenResourceApi.get_user_info``."""
    return UserInfo(id=principal.name, name=principal.name, roles=[Role(name=principal.role)])


class ApiKey(BaseModel):
    """A key as ``GET /api/v1/keys`` lists it: never its secret or hash."""

    model_config = ConfigDict(extra="forbid")

    key_id: str
    name: str
    role: str
    created_at: str
    created_by: str
    revoked_at: str | None
    last_used_at: str | None


ADMIN: dict[int | str, dict[str, Any]] = {
    **CALLER,
    403: {"description": "The key's role is not admin"},
}


@router.get("/v1/keys", response_model=list[ApiKey], tags=["native"], responses=ADMIN)
def list_keys(
    _admin: Principal = require("admin"),  # noqa: B008
    svc: Services = Depends(services),  # noqa: B008
) -> list[ApiKey]:
    """Every API key, revoked ones included (creating one is the CLI's: it shows the secret)."""
    return [ApiKey(**key.as_row()) for key in authenticator(svc).keys.all()]


@router.delete(
    "/v1/keys/{key_id}", tags=["native"], responses={**ADMIN, 404: {"description": "No such key"}}
)
def revoke_key(
    key_id: str,
    admin: Principal = require("admin"),  # noqa: B008
    svc: Services = Depends(services),  # noqa: B008
) -> dict[str, str]:
    """Revoke a key: no new tokens; its tokens stop within ``ES_SCHED_API_KEY_CACHE_S``."""
    if not authenticator(svc).keys.revoke(key_id, utcnow()):
        raise ApiError(404, f"no API key {key_id!r}")
    log.info("API key %s revoked by %s", key_id, admin.name)
    return {"revoked": key_id}
