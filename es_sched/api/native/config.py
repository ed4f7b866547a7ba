"""``/api/v1/config``: the dispatcher's run-time settings (rate limits, concurrency, bans,
pools, policies) on the compacted config topic, the same records ``es-sched config`` writes.

Keys and values are the config topic's (``es_sched.serialization.config`` lists them, e.g.
``rate:type:transcode`` -> ``{"rate": 5, "burst": 10}``, ``ban-version:1.2.0`` -> ``{}``); a
PUT is checked by the dispatcher's own parser before it is produced (a bad one is a 400 naming
the problem), a DELETE writes the tombstone that lifts the setting. Reads fold the topic on
every call, so an answer includes every write acknowledged before it. Admin only.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Body, Depends

from es_sched.api.auth import Principal, require
from es_sched.api.errors import ApiError
from es_sched.api.native.models import ConfigSettings, ConfigValue
from es_sched.api.services import Services, services
from es_sched.kafka import config_client

router = APIRouter(prefix="/config")
ADMIN = require("admin")
SVC = Depends(services)


@router.get("", response_model=ConfigSettings)
def get_all(svc: Services = SVC, who: Principal = ADMIN) -> ConfigSettings:
    return ConfigSettings(settings=config_client.current(svc.settings))


@router.get("/{key:path}", response_model=ConfigValue)
def get_one(key: str, svc: Services = SVC, who: Principal = ADMIN) -> ConfigValue:
    settings = config_client.current(svc.settings)
    if key not in settings:
        raise ApiError(404, f"no config setting {key!r} in force")
    return ConfigValue(key=key, value=settings[key])


@router.put("/{key:path}", response_model=ConfigValue)
def put(
    key: str,
    value: dict[str, Any] = Body(  # noqa: B008
        ..., examples=[{"rate": 5, "burst": 10}], description="the setting's JSON value"
    ),
    svc: Services = SVC,
    who: Principal = ADMIN,
) -> ConfigValue:
    config_client.publish(svc.settings, key, value)  # SchemaError (400) when malformed
    return ConfigValue(key=key, value=value)


@router.delete("/{key:path}", response_model=ConfigValue)
def delete(key: str, svc: Services = SVC, who: Principal = ADMIN) -> ConfigValue:
    config_client.publish(svc.settings, key, None)
    return ConfigValue(key=key, value=None)
