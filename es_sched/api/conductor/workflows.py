"""Conductor's workflow resource under ``/api/workflow`` (issue 14 item 1)."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter(prefix="/api", tags=["workflow"])
