"""Run-time dispatcher limits as records on the compacted ``config`` topic ("config events").

Key -> JSON value (a tombstone removes the setting):

- ``rate:type:<T>``     ``{"rate": R, "burst": B}``  tokens per second for task type T
- ``rate:tenant:<X>``   ``{"rate": R, "burst": B}``  the same for tenant X
- ``rate:key:<K>``      ``{"rate": R, "burst": B}``  the same for rate-limit key K (any type)
- ``concurrency:<T>``   ``{"limit": N}``             at most N tasks of type T in flight
- ``ban-version:<V>``   ``{}``                       workers of version V get nothing
- ``pool:<T>``          ``{"pool": P}``              tasks of type T run in pool P
- ``policy:<P>``        ``{"policy": "binpack" | "spread"}``
- ``tenant:<X>``        ``{"weight": W, "quota": N}`` tenant X's fair share within a level (default
  weight 1) and at most N of its tasks in flight (ADR 68); either may be left out
- ``blacklist:<W>``     ``{"state": "blacklisted", "until": T, "failures": [...], ...}`` or
  ``{"state": "lifted", "at": T, "by": WHO}``: worker W's blacklisting (ADR 58), written by
  the dispatcher that decided it and by an operator's lift
- ``version-rule:<T>``  ``{"max_failure_rate": F, "min_samples": N}``: stop a worker version
  for task type T (``*``: any type) when it fails too often (ADR 70)
- ``version-stop:<T>|<V>`` ``{"state": "stopped", "seen": {...}, ...}`` or ``{"state":
  "lifted", ...}``: version V gets no task of type T, written by the judging dispatcher; an
  operator's lift
- ``rollout:<T>``       ``{"state": "rolling" | "promoted" | "stopped", "candidate", "current",
  "share", ...}``: a gradual rollout of a worker version for task type T (ADR 70)

Each value has a schema ``schemas/config/<kind, ":" as ".">.v1.json`` (v1; values carry no
version field, a v2 will add ``schema_version``). ``parse`` validates one record against it into
a ``ConfigChange`` and raises ``SchemaError`` naming the key otherwise;
``es_sched.dispatch.config.apply`` folds it into the dispatcher's core. ``es-sched config``
writes the records (``encode``, checked with ``parse`` first), the dispatcher tails them.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any

import orjson

from es_sched.errors import SchemaError
from es_sched.serialization.codec import load_record
from es_sched.serialization.schemas import Compiled, default_catalog

FAMILY = "config"
POLICIES = ("binpack", "spread")
KINDS = (
    "rate:type",
    "rate:tenant",
    "concurrency",
    "ban-version",
    "pool",
    "policy",
    "rate:key",
    "blacklist",
    "version-rule",
    "version-stop",
    "rollout",
    "tenant",
)
VERSIONS = dict.fromkeys(KINDS, 1)  # kind -> the version written and read


@dataclass(frozen=True)
class ConfigChange:
    kind: str  # one of KINDS
    subject: str  # task type, tenant, version, pool or worker
    value: dict[str, Any] | None  # None: the setting is removed (tombstone)


def rate_key(subject: str, tenant: bool = False, scope: str | None = None) -> str:
    """The key of a rate setting; ``scope`` ("type", "tenant" or "key") wins over ``tenant``."""
    return f"rate:{scope or ('tenant' if tenant else 'type')}:{subject}"


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
    value = load_record(raw, f"config {key!r}")
    try:
        _compiled(kind).require(value)
    except SchemaError as exc:
        raise SchemaError(f"config {key!r}: {exc}") from None
    if kind == "blacklist" and value["state"] == "blacklisted":
        missing = sorted({"until", "outcomes", "failures"} - set(value))
        if missing:
            raise SchemaError(f"config {key!r}: a blacklisting without {', '.join(missing)}")
    if kind == "version-stop" and "|" not in subject.strip("|"):
        raise SchemaError(f"config {key!r}: the subject is <task type>|<version>")
    if kind in ("version-stop", "rollout") and not _is_time(value["at"]):
        raise SchemaError(f"config {key!r}: at {value['at']!r} is not an ISO-8601 time")
    if kind == "rollout" and value["candidate"] == value["current"]:
        raise SchemaError(f"config {key!r}: the candidate and current versions are the same")
    return ConfigChange(kind, subject, value)


def _is_time(value: str) -> bool:
    try:
        datetime.fromisoformat(value)
    except ValueError:
        return False
    return True


def schema_name(kind: str) -> str:
    """The schema file's type name of a kind: ``rate:type`` -> ``rate.type``."""
    return kind.replace(":", ".")


@cache
def _compiled(kind: str) -> Compiled:
    return default_catalog().compiled(FAMILY, schema_name(kind), VERSIONS[kind])


def _split(key: str) -> tuple[str, str]:
    for kind in KINDS:
        if key.startswith(kind + ":") and len(key) > len(kind) + 1:
            return kind, key[len(kind) + 1 :]
    raise SchemaError(f"unknown config key {key!r}")
