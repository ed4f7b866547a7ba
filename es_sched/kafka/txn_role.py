"""What a transactional role and the loop agree on (``es_sched.kafka.transactional``).

- ``TransactionalRole``: the port each exactly-once role implements (the decider, the timer
  service, the retry relay): ``step`` turns consumed records into a ``Batch`` (``Out`` records
  and the input offsets to commit with them) or None; ``rewind`` drops or rebuilds what depended
  on a batch that did not (or may not have) committed; ``tick`` ends an iteration.
- ``TxnProducer`` / ``ProducerFactory``: the part of ``confluent_kafka.Producer`` the loop uses,
  so tests pass fakes.
- ``BatchSizer``: how many records the next poll asks for (ADR 30).

Split from the loop itself to keep each module under ~400 lines.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

from confluent_kafka import Message, TopicPartition

from es_sched.kafka.dead_letters import Headers

TP = tuple[str, int]


class Out(NamedTuple):
    """One record to produce inside the transaction (``partition=None``: by key, murmur2).
    A named tuple, not a frozen dataclass: a decider batch makes thousands, and a frozen
    dataclass's ``__init__`` (``object.__setattr__`` per field) cost several times as much."""

    topic: str
    key: str | bytes | None
    value: bytes | None
    headers: Headers | None = None
    partition: int | None = None


class Outgoing(Protocol):
    """What the transaction reads of a record to write: ``Out``, or a role's own named tuple
    of the same fields. The decider hands its outbox records over as built: copying each into
    an ``Out`` (thousands per batch) cost 3 % of its samples on the media workflow (py-spy,
    ``bench/decider_cpu.py --media``)."""

    @property
    def topic(self) -> str: ...
    @property
    def key(self) -> str | bytes | None: ...
    @property
    def value(self) -> bytes | None: ...
    @property
    def headers(self) -> Headers | None: ...
    @property
    def partition(self) -> int | None: ...


def _nothing() -> None:
    return None


@dataclass
class Batch:
    """What one step writes: records, and the next offset per input partition to commit with
    them (``None``: the consumer's current positions)."""

    records: Sequence[Outgoing]
    offsets: dict[TP, int] | None
    on_commit: Callable[[], None] = field(default=_nothing)


class TransactionalRole(Protocol):
    def step(self, records: list[Message]) -> Batch | None:
        """Apply the consumed records; what to write now, or None when there is nothing."""

    def rewind(self, producer_lost: bool) -> None:
        """The last batch did not commit (or, ``producer_lost``, may have): drop or rebuild the
        state that depends on it."""

    def tick(self) -> None:
        """End of an iteration: metrics, pausing and resuming partitions."""


class TxnProducer(Protocol):
    """The part of ``confluent_kafka.Producer`` the loop uses (tests pass fakes)."""

    def init_transactions(self, timeout: float = -1) -> None: ...
    def begin_transaction(self) -> None: ...
    def produce(
        self,
        topic: str,
        value: str | bytes | None = None,
        key: str | bytes | None = None,
        partition: int = -1,
        *,
        headers: Headers | None = None,
    ) -> None: ...
    def poll(self, timeout: float = -1) -> int: ...
    def send_offsets_to_transaction(
        self, positions: list[TopicPartition], group_metadata: Any, timeout: float = -1
    ) -> None: ...
    def commit_transaction(self, timeout: float = -1) -> None: ...
    def abort_transaction(self, timeout: float = -1) -> None: ...
    def purge(
        self, in_queue: bool = True, in_flight: bool = True, blocking: bool = True
    ) -> None: ...
    def close(self) -> bool: ...


class ProducerFactory(Protocol):
    def producer(self, transactional_id: str | None = None, **extra: Any) -> TxnProducer: ...


class BatchSizer:
    """How many records the next poll asks for (ADR 30): ``base`` while input trickles in, so
    an idle system commits small batches at once; doubled, up to ``ceiling``, while polls come
    back full (a backlog) and a whole iteration (decide, produce, commit) stays within half of
    ``budget_s``; halved again when a poll comes back under half full or an iteration went
    over the budget. A transaction's fixed cost (offsets, commit markers, two round trips) is
    then spread over more inputs exactly when there is a queue to drain, and the latency a
    batch adds is bounded by the budget, not by the ceiling."""

    def __init__(self, base: int, ceiling: int | None = None, budget_s: float = math.inf) -> None:
        self.base, self.ceiling, self.budget_s = base, max(base, ceiling or base), budget_s
        self.size = base

    def observe(self, got: int, took_s: float) -> None:
        """The last poll returned ``got`` records and its iteration took ``took_s``."""
        if took_s > self.budget_s or got < self.size // 2:
            self.size = max(self.base, self.size // 2)
        elif got >= self.size and took_s <= self.budget_s / 2:
            self.size = min(self.ceiling, self.size * 2)
