"""Conductor's metadata resource under ``/api/metadata`` (issue 14 item 1)."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter(prefix="/api/metadata", tags=["metadata"])
