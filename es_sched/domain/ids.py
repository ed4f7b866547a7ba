"""Deterministic identifiers.

Event ids (refusals' too), workflow ids derived from command ids and timer ids are uuid5
hashes, so replaying the same inputs yields the same ids. Ids that must be fresh (task ids,
lease tokens, child workflow ids) come from the caller through an ``IdSource``; the core never
draws randomness.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable, Iterator

NAMESPACE = uuid.UUID("6b2f0c1e-5f4e-4d0a-9b7a-3c8e2d1f0a55")

IdSource = Callable[[], str]


def event_id(workflow_id: str, seq: int) -> str:
    return str(uuid.uuid5(NAMESPACE, f"event:{workflow_id}:{seq}"))


def refusal_event_id(workflow_id: str, input_id: str) -> str:
    """The id of the refusal of one input for a workflow with no history: the same input
    refused again is the same event (readers dedupe by it)."""
    return str(uuid.uuid5(NAMESPACE, f"refusal:{workflow_id}:{input_id}"))


def workflow_id_for_command(command_id: str) -> str:
    """The workflow a StartWorkflow command creates: one command id, one workflow, one partition."""
    return str(uuid.uuid5(NAMESPACE, f"workflow:{command_id}"))


def timer_id(workflow_id: str, kind: str, key: str) -> str:
    return str(uuid.uuid5(NAMESPACE, f"timer:{workflow_id}:{kind}:{key}"))


def unit_fraction(*parts: object) -> float:
    """A stable number in [0, 1) from its parts: deterministic jitter without randomness."""
    digest = hashlib.blake2b(":".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


def counter_ids(prefix: str = "id") -> IdSource:
    """An IdSource for tests and simulation: ``prefix-1``, ``prefix-2``, ..."""
    numbers: Iterator[int] = iter(range(1, 2**62))
    return lambda: f"{prefix}-{next(numbers)}"
