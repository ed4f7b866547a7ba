"""Run-time config records folded into the dispatcher's core.

Rates and concurrency land in the same ``Limits`` model the TaskDefs on ready records feed
(``es_sched.dispatch.core.limits``): a ``{"rate", "burst"}`` is ``burst`` starts per
``burst / rate`` seconds.

The records' keys, values and validation live in ``es_sched.serialization.config``; ``apply``
folds one parsed ``ConfigChange`` into a ``DispatchCore``.
"""

from __future__ import annotations

from typing import cast

from es_sched.blacklist import of_record
from es_sched.dispatch.core.engine import DispatchCore
from es_sched.dispatch.core.limits import Rate
from es_sched.dispatch.core.placement import Policy
from es_sched.errors import SchemaError
from es_sched.serialization.config import (
    KINDS,
    POLICIES,
    ConfigChange,
    encode,
    key_for,
    parse,
    rate_key,
)

__all__ = ["KINDS", "POLICIES", "ConfigChange", "apply", "encode", "key_for", "parse", "rate_key"]


def apply(core: DispatchCore, change: ConfigChange, default_policy: Policy = "binpack") -> None:
    """Fold one change into the core; a removed policy falls back to ``default_policy``."""
    v = change.value
    match change.kind:
        case "rate:type" | "rate:tenant" | "rate:key":
            rate = None if v is None else Rate.per_second(v["rate"], v.get("burst"))
            core.limits.set_rate((change.kind.split(":")[1], change.subject), rate)
        case "concurrency":
            core.limits.set_concurrency(change.subject, None if v is None else v["limit"])
        case "ban-version":
            if v is None:
                core.fleet.banned_versions.discard(change.subject)
            else:
                core.fleet.banned_versions.add(change.subject)
        case "pool":
            if v is None:
                core.pools.pop(change.subject, None)
            else:
                core.pools[change.subject] = v["pool"]
        case "policy":
            policy = default_policy if v is None else cast(Policy, v["policy"])
            core.policies[change.subject] = policy
        case "tenant":
            core.fair.set_weight(change.subject, None if v is None else v.get("weight"))
            core.limits.set_quota(change.subject, None if v is None else v.get("quota"))
        case "blacklist":
            if v is None:
                core.fleet.forget_blacklist(change.subject)
            else:
                core.fleet.apply_blacklist(of_record(change.subject, v))
        case "version-rule" | "version-stop" | "rollout":
            core.fleet.versions.configure(change.kind, change.subject, v)
        case _:
            raise SchemaError(f"unknown config kind {change.kind!r}")
