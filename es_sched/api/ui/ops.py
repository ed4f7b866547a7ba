"""The console's operations pages: queues, workers, definitions, submit, media (issue 14 item 4)."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter(prefix="/ui", include_in_schema=False)
