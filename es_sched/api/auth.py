"""Who is calling, and may they (issue 14 item 3; filled in by the auth work, ADR 24).

Routes declare the least role they need with ``Depends(require("operator"))`` and get the
``Principal`` back, whose ``name`` every command they send carries. Roles: ``viewer`` reads,
``worker`` polls and updates tasks, ``operator`` acts on workflows (and reads), ``admin``
does everything (definitions, config, keys).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fastapi import Depends, Request

from es_sched.api.errors import ApiError
from es_sched.api.services import Services, services

ROLES = ("viewer", "worker", "operator", "admin")


@dataclass(frozen=True)
class Principal:
    name: str  # the key id, or "anonymous" with auth off
    role: str


def require(role: str) -> Any:
    """A dependency admitting callers whose role grants ``role``."""
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}")

    def check(request: Request, svc: Services = Depends(services)) -> Principal:  # noqa: B008
        if svc.settings.api.auth == "off":
            return Principal("anonymous", "admin")
        raise ApiError(401, "authentication is not available yet")

    dependency: Callable[..., Principal] = check
    return Depends(dependency)
