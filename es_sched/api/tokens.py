"""Conductor's token protocol, ``POST /api/token`` (issue 14 item 3)."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter(prefix="/api", tags=["token"])
