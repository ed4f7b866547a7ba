"""Run-time dispatcher limits as records on the compacted ``config`` topic ("config events").

Key -> JSON value (a tombstone removes the setting):

- ``rate:type:<T>``     ``{"rate": R, "burst": B}``  tokens per second for task type T
- ``rate:tenant:<X>``   ``{"rate": R, "burst": B}``  the same for tenant X
- ``concurrency:<T>``   ``{"limit": N}``             at most N tasks of type T in flight
- ``ban-version:<V>``   ``{}``                       workers of version V get nothing
- ``pool:<T>``          ``{"pool": P}``              tasks of type T run in pool P
- ``policy:<P>``        ``{"policy": "binpack" | "spread"}``

``parse`` validates one record into a ``ConfigChange``; ``es_sched.dispatch.config.apply`` folds
it into the dispatcher's core. ``es-sched config`` writes the records, the dispatcher tails them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeGuard

import orjson

from es_sched.errors import SchemaError

POLICIES = ("binpack", "spread")
KINDS = ("rate:type", "rate:tenant", "concurrency", "ban-version", "pool", "policy")


@dataclass(frozen=True)
class ConfigChange:
    kind: str  # one of KINDS
    subject: str  # task type, tenant, version or pool
    value: dict[str, Any] | None  # None: the setting is removed (tombstone)


def rate_key(subject: str, tenant: bool = False) -> str:
    return f"rate:{'tenant' if tenant else 'type'}:{subject}"


def key_for(kind: str, subject: str) -> str:
    if kind not in KINDS:
        raise SchemaError(f"unknown config kind {kind!r}")
    return f"{kind}:{subject}"


def encode(value: dict[str, Any] | None) -> bytes | None:
    return None if value is None else orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


def parse(key: str, raw: bytes | None) -> ConfigChange:
    """One config record; raises ``SchemaError`` naming the key when it is malformed."""
    kind, subject = _split(key)
    if raw is None:
        return ConfigChange(kind, subject, None)
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise SchemaError(f"config {key!r}: not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise SchemaError(f"config {key!r}: expected a JSON object")
    if kind.startswith("rate:"):
        rate, burst = value.get("rate"), value.get("burst", 1)
        if not (_number(rate) and rate > 0 and _number(burst) and burst >= 1):
            raise SchemaError(f"config {key!r}: expected rate > 0 and burst >= 1, got {value}")
    elif kind == "concurrency":
        limit = value.get("limit")
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 0:
            raise SchemaError(f"config {key!r}: expected a whole limit >= 0, got {value}")
    elif kind == "pool":
        if not isinstance(value.get("pool"), str) or not value["pool"]:
            raise SchemaError(f"config {key!r}: expected a pool name, got {value}")
    elif kind == "policy" and value.get("policy") not in POLICIES:
        raise SchemaError(f"config {key!r}: policy must be one of {POLICIES}, got {value}")
    return ConfigChange(kind, subject, value)


def _split(key: str) -> tuple[str, str]:
    for kind in KINDS:
        if key.startswith(kind + ":") and len(key) > len(kind) + 1:
            return kind, key[len(kind) + 1 :]
    raise SchemaError(f"unknown config key {key!r}")


def _number(value: object) -> TypeGuard[float]:
    return isinstance(value, int | float) and not isinstance(value, bool)
