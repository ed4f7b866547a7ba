"""Conductor's task resource under ``/api/tasks``: HTTP workers (issue 14 item 1)."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter(prefix="/api/tasks", tags=["task"])
