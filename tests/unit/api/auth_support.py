"""An in-memory ``Keys`` and an application with auth on over it, for the auth unit tests."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from fastapi import APIRouter, FastAPI

from es_sched import bootstrap
from es_sched.api.app import create_app
from es_sched.api.auth import Authenticator, Principal, require
from es_sched.api.keys import StoredKey, new_key
from es_sched.api.services import Lazy
from es_sched.settings import ApiSettings, load_settings

SECRET = "unit-test-jwt-secret-0123456789abcdef"


class MemoryKeys:
    def __init__(self) -> None:
        self.keys: dict[str, StoredKey] = {}
        self.reads = 0

    def add(self, key: StoredKey) -> None:
        self.keys[key.key_id] = key

    def get(self, key_id: str) -> StoredKey | None:
        self.reads += 1
        return self.keys.get(key_id)

    def all(self) -> list[StoredKey]:
        return list(self.keys.values())

    def revoke(self, key_id: str, now: datetime) -> bool:
        if key_id not in self.keys:
            return False
        self.keys[key_id] = replace(self.keys[key_id], revoked_at=now)
        return True

    def touch(self, key_id: str, now: datetime) -> None:
        self.keys[key_id] = replace(self.keys[key_id], last_used_at=now)

    def close(self) -> None:
        pass


class Clock:
    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def authenticator(
    keys: MemoryKeys, clock: Clock, jwt_secret: str = SECRET, cache_s: float = 5.0
) -> Authenticator:
    settings = ApiSettings(auth="on", jwt_secret=jwt_secret, token_ttl_s=600, key_cache_s=cache_s)
    memory: Lazy[MemoryKeys] = Lazy(lambda: keys)
    return Authenticator(settings, memory, clock)  # type: ignore[arg-type]


def key(keys: MemoryKeys, role: str, clock: Clock) -> tuple[str, str]:
    stored, secret = new_key(role, "", "test", datetime.fromtimestamp(clock.now))
    keys.add(stored)
    return stored.key_id, secret


probe = APIRouter()


@probe.get("/api/probe")
def _probe_viewer(p: Principal = require("viewer")) -> dict[str, str]:  # noqa: B008
    return {"name": p.name, "role": p.role}


@probe.post("/api/probe-operator")
def _probe_operator(p: Principal = require("operator")) -> dict[str, str]:  # noqa: B008
    return {"name": p.name}


@probe.post("/api/probe-worker")
def _probe_worker(p: Principal = require("worker")) -> dict[str, str]:  # noqa: B008
    return {"name": p.name}


@probe.get("/ui/probe")
def _probe_page(p: Principal = require("viewer")) -> dict[str, str]:  # noqa: B008
    return {"name": p.name}


def app(keys: MemoryKeys, clock: Clock, auth: str = "on") -> FastAPI:
    """The real application with auth ``auth``, keys in ``keys``, and probe routes that
    ``require`` each kind of role (no route of the branch needs one yet)."""
    base = load_settings()
    api = ApiSettings(auth=auth, jwt_secret=SECRET, token_ttl_s=600)
    svc = bootstrap.api_services(replace(base, api=api))
    svc.auth = authenticator(keys, clock)
    application = create_app(svc)
    application.include_router(probe)
    return application
