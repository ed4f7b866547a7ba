"""A workflow's correlation id as Conductor's clients know it: the one its start gave, or none.

A start without one still needs a correlation id on its events' envelopes (the chain of events
is traced by it), and the decider uses the workflow id there; the read model keeps the
envelope's. That id is not the client's correlation id: Conductor answers null when a start
gave none, and so does every answer of the API and the console, through ``given``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def given(row: Mapping[str, Any]) -> str | None:
    """The correlation id a workflow row's start was given, or None."""
    found = row.get("correlation_id")
    return str(found) if found and found != row.get("workflow_id") else None
