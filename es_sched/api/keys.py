"""API keys (ADR 25): an id, an argon2id hash of the secret, a role, in PostgreSQL.

The keys live in a schema of their own, ``<ES_SCHED_PG_SCHEMA_NAME>_auth``: the read model's
schema is replaced wholesale by a rebuild (``projections.postgres.rebuild``), the keys must
survive it. The schema and its one table are created on first use with ``CREATE ... IF NOT
EXISTS`` under a transaction-scoped advisory lock, so two API processes (or the CLI and an API
process) starting together do not race on the catalog. A secret is shown once, when the key is
created; only its hash is stored, so a leaked database dump yields no usable key. Revocation
stamps ``revoked_at`` (the row stays, for the audit trail of who held it). The schema also
holds the log-in failure counts every API process shares (``api.throttle``).
"""

from __future__ import annotations

import re
import secrets
import threading
import uuid
import zlib
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from sqlalchemy import Connection, Engine, text

from es_sched.api.roles import ROLES
from es_sched.errors import InfrastructureError
from es_sched.projections.postgres.store import available

# argon2-cffi's defaults are argon2id with RFC 9106's low-memory profile (t=3, 64 MiB, p=4);
# a hash is computed on key creation and on each ``POST /api/token``, never per request.
_hasher = PasswordHasher()
KEY_ID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


class KeyStoreUnavailable(InfrastructureError):
    """PostgreSQL, where the keys are, cannot be reached."""


@dataclass(frozen=True)
class StoredKey:
    key_id: str
    name: str
    role: str
    secret_hash: str
    created_at: datetime
    created_by: str
    revoked_at: datetime | None = None
    last_used_at: datetime | None = None

    def as_row(self) -> dict[str, Any]:
        """What ``keys list`` shows: everything but the hash."""
        return {
            "key_id": self.key_id,
            "name": self.name,
            "role": self.role,
            "created_at": self.created_at.isoformat(),
            "created_by": self.created_by,
            "revoked_at": self.revoked_at.isoformat() if self.revoked_at else None,
            "last_used_at": self.last_used_at.isoformat() if self.last_used_at else None,
        }


def hash_secret(secret: str) -> str:
    return _hasher.hash(secret)


def secret_matches(secret_hash: str, secret: str) -> bool:
    try:
        return _hasher.verify(secret_hash, secret)
    except (VerificationError, InvalidHashError):
        return False


def new_key(role: str, name: str, created_by: str, now: datetime) -> tuple[StoredKey, str]:
    """A fresh key and its secret (the only time the secret exists in clear)."""
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}; one of {', '.join(ROLES)}")
    key_id, secret = str(uuid.uuid4()), secrets.token_urlsafe(32)
    key = StoredKey(key_id, name or key_id, role, hash_secret(secret), now, created_by)
    return key, secret


class Keys(Protocol):
    """The key store port: PostgreSQL in the API, a dict in unit tests."""

    def add(self, key: StoredKey) -> None: ...
    def get(self, key_id: str) -> StoredKey | None: ...
    def all(self) -> list[StoredKey]: ...
    def revoke(self, key_id: str, now: datetime) -> bool: ...
    def touch(self, key_id: str, now: datetime) -> None: ...
    def close(self) -> None: ...


COLUMNS = "key_id, name, role, secret_hash, created_at, created_by, revoked_at, last_used_at"


class PgKeys:
    """``Keys`` over PostgreSQL, schema ``schema`` (its name is checked by the settings)."""

    def __init__(self, engine: Engine, schema: str) -> None:
        if not re.fullmatch(r"[a-z_][a-z0-9_]{0,62}", schema):
            raise ValueError(f"bad schema name {schema!r}")
        self.engine, self.schema, self.table = engine, schema, f"{schema}.api_keys"
        self._ready = False
        self._lock = threading.Lock()

    def _ensure(self) -> None:
        if self._ready:
            return
        with self._lock, self._available("create"), self.engine.begin() as conn:
            key = zlib.crc32(f"es-sched-auth:{self.schema}".encode())
            conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": key})
            conn.execute(text(f"CREATE SCHEMA IF NOT EXISTS {self.schema}"))
            conn.execute(
                text(
                    f"CREATE TABLE IF NOT EXISTS {self.table} ("
                    "key_id text PRIMARY KEY, name text NOT NULL, role text NOT NULL, "
                    "secret_hash text NOT NULL, created_at timestamptz NOT NULL, "
                    "created_by text NOT NULL, revoked_at timestamptz, "
                    "last_used_at timestamptz)"
                )
            )
            # failed log-ins per key at an address and per address (``api.throttle``)
            conn.execute(
                text(
                    f"CREATE TABLE IF NOT EXISTS {self.schema}.login_failures ("
                    "bucket text PRIMARY KEY, failures integer NOT NULL, "
                    "window_start timestamptz NOT NULL)"
                )
            )
            self._ready = True

    @contextmanager
    def connect(self, what: str, write: bool = False) -> Iterator[Connection]:
        """A connection to the auth schema (a transaction when ``write``), its tables made,
        driver errors raised as ``KeyStoreUnavailable`` naming ``what``."""
        self._ensure()
        with self._available(what), self.engine.begin() if write else self.engine.connect() as c:
            yield c

    def _available(self, what: str) -> AbstractContextManager[None]:
        return available(f"API keys {what}", KeyStoreUnavailable)

    def add(self, key: StoredKey) -> None:
        self._ensure()
        with self._available("add"), self.engine.begin() as conn:
            conn.execute(
                text(
                    f"INSERT INTO {self.table} ({COLUMNS}) VALUES (:key_id, :name, :role, "  # noqa: S608
                    ":secret_hash, :created_at, :created_by, :revoked_at, :last_used_at)"
                ),
                key.__dict__,
            )

    def get(self, key_id: str) -> StoredKey | None:
        if not KEY_ID.match(key_id):
            return None  # never send arbitrary text (NUL bytes, megabytes) to the database
        self._ensure()
        with self._available("read"), self.engine.connect() as conn:
            row = conn.execute(
                text(f"SELECT {COLUMNS} FROM {self.table} WHERE key_id = :k"),  # noqa: S608
                {"k": key_id},
            ).one_or_none()
        return StoredKey(*row) if row else None

    def all(self) -> list[StoredKey]:
        self._ensure()
        with self._available("list"), self.engine.connect() as conn:
            rows = conn.execute(
                text(f"SELECT {COLUMNS} FROM {self.table} ORDER BY created_at, key_id")  # noqa: S608
            ).all()
        return [StoredKey(*row) for row in rows]

    def revoke(self, key_id: str, now: datetime) -> bool:
        if not KEY_ID.match(key_id):
            return False
        self._ensure()
        with self._available("revoke"), self.engine.begin() as conn:
            found = conn.execute(
                text(
                    f"UPDATE {self.table} SET revoked_at = COALESCE(revoked_at, :now) "  # noqa: S608
                    "WHERE key_id = :k"
                ),
                {"k": key_id, "now": now},
            ).rowcount
        return bool(found)

    def touch(self, key_id: str, now: datetime) -> None:
        self._ensure()
        with self._available("touch"), self.engine.begin() as conn:
            conn.execute(
                text(f"UPDATE {self.table} SET last_used_at = :now WHERE key_id = :k"),  # noqa: S608
                {"k": key_id, "now": now},
            )

    def close(self) -> None:
        self.engine.dispose()


def utcnow() -> datetime:
    return datetime.now(UTC)
