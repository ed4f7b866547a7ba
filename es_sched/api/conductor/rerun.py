"""Conductor's restart and rerun of a workflow, ``POST /api/workflow/{id}/restart|rerun``
(issue 14 item 1), on the core's restart and rerun commands."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter(prefix="/api", tags=["workflow"])
