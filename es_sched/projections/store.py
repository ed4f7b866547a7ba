"""The port between the projector loop and a read-model store (PostgreSQL, a search engine).

The loop (``es_sched.projections.projector``) reads a batch of events, asks the store for the
rows of the workflows it has not cached (``load``) and for the checkpoints of its partitions
(``checkpoints``), folds the events with ``views.apply`` and hands the store one ``Batch``:
whole rows to write, the events to archive (if the store archives) and the new checkpoints.
``write`` must be atomic where the store allows it (PostgreSQL: one transaction) and must be
idempotent and version-guarded everywhere: a row is replaced only by a higher ``version``, so a
re-delivered or stale batch changes nothing. Only after ``write`` returns does the loop commit
its Kafka offsets.

A store raises ``StoreUnavailable`` when its backend cannot be reached: the loop then stops
advancing, keeps its position and retries with backoff.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from es_sched.domain.events import Event
from es_sched.errors import InfrastructureError
from es_sched.projections.views import Row, Rows


class StoreUnavailable(InfrastructureError):
    """The backend is down or unreachable; retry later."""


@dataclass(frozen=True)
class Archived:
    event: Event
    raw: bytes  # the record's value as the log has it
    partition: int
    offset: int


@dataclass
class Batch:
    workflows: dict[str, Row] = field(default_factory=dict)  # by workflow id: whole rows
    tasks: dict[str, Row] = field(default_factory=dict)  # by task id: whole rows
    archive: list[Archived] = field(default_factory=list)
    checkpoints: dict[int, int] = field(default_factory=dict)  # partition -> next offset
    duplicates: dict[int, int] = field(default_factory=dict)  # partition -> records skipped


class Store(Protocol):
    name: str  # the projection's name in checkpoints and metrics: "pg" | "search"

    def ensure(self) -> None:
        """Create or migrate what the store needs; idempotent; StoreUnavailable when down."""
        ...

    def load(self, workflow_ids: list[str]) -> dict[str, Rows]:
        """The stored rows of these workflows (missing ones are absent)."""
        ...

    def checkpoints(self, topic: str, partitions: list[int]) -> dict[int, int]:
        """Next offset to project per partition (absent: nothing projected yet)."""
        ...

    def write(self, topic: str, batch: Batch) -> None:
        """Apply the batch (atomically where possible); raise StoreUnavailable when down."""
        ...

    def close(self) -> None: ...
