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


_NAMESPACE_BYTES = NAMESPACE.bytes


def _uuid5(name: str) -> str:
    """``str(uuid.uuid5(NAMESPACE, name))``, the same characters (RFC 4122 section 4.3) without
    the ``UUID`` object, which cost more than the hash: a decider input makes several ids."""
    sha1 = hashlib.sha1(_NAMESPACE_BYTES + name.encode(), usedforsecurity=False)  # as uuid5
    digest = bytearray(sha1.digest()[:16])
    digest[6] = (digest[6] & 0x0F) | 0x50  # version 5
    digest[8] = (digest[8] & 0x3F) | 0x80  # the RFC 4122 variant
    h = digest.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def event_id(workflow_id: str, seq: int) -> str:
    return _uuid5(f"event:{workflow_id}:{seq}")


def refusal_event_id(workflow_id: str, input_id: str) -> str:
    """The id of the refusal of one input for a workflow with no history: the same input
    refused again is the same event (readers dedupe by it)."""
    return _uuid5(f"refusal:{workflow_id}:{input_id}")


def workflow_id_for_command(command_id: str) -> str:
    """The workflow a StartWorkflow command creates: one command id, one workflow, one partition."""
    return _uuid5(f"workflow:{command_id}")


def timer_id(workflow_id: str, kind: str, key: str) -> str:
    return _uuid5(f"timer:{workflow_id}:{kind}:{key}")


def unit_fraction(*parts: object) -> float:
    """A stable number in [0, 1) from its parts: deterministic jitter without randomness."""
    digest = hashlib.blake2b(":".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


def counter_ids(prefix: str = "id") -> IdSource:
    """An IdSource for tests and simulation: ``prefix-1``, ``prefix-2``, ..."""
    numbers: Iterator[int] = iter(range(1, 2**62))
    return lambda: f"{prefix}-{next(numbers)}"
