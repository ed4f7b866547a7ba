"""The SLA extension of both start requests (ADR 67): Conductor's ``StartWorkflowRequest`` and
the native ``POST /api/v1/workflows`` take ``slaTier`` and a deadline, absolute or relative."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Literal

from pydantic import BaseModel, Field

from es_sched.api.errors import ApiError


class SlaRequest(BaseModel):
    slaTier: Literal["P0", "P1", "P2", "P3"] | None = Field(
        default=None, description="es-sched extension (ADR 67): SLA tier, P0 most urgent"
    )
    deadline: datetime | None = Field(
        default=None,
        description="es-sched extension (ADR 67): when the workflow should have ended (RFC 3339)",
    )
    deadlineSeconds: float | None = Field(
        default=None,
        gt=0,
        description="es-sched extension (ADR 67): the deadline, in seconds from now",
    )

    def deadline_at(self) -> datetime | None:
        """The deadline asked for: absolute or from now, not both."""
        if self.deadline is not None and self.deadlineSeconds is not None:
            raise ApiError(400, "give deadline or deadlineSeconds, not both")
        if self.deadlineSeconds is not None:
            return datetime.now(UTC) + timedelta(seconds=self.deadlineSeconds)
        return self.deadline
