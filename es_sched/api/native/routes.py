"""The native API under ``/api/v1`` (issue 14 item 2)."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter(prefix="/api/v1", tags=["native"])
