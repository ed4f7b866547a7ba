"""Fair share between tenants within a level (ADR 68): start-time fair queueing per pool.

A tenant's weight comes from its config record (``tenant:<X>``, default 1). Every task a
dispatcher starts in a pool charges its tenant ``1 / weight`` of that pool's virtual time: a
tenant's *tag* is where its next start would begin, ``max(its last finish, the pool's virtual
time)``, and within a level of a task type the tenant with the smallest tag goes first. So
backlogged tenants start tasks in proportion to their weights, and a tenant that was idle
comes in at the pool's virtual time, neither behind another's backlog nor with credit banked
while it had nothing to run. Handed-back tasks still go first, and inside one tenant the old
order holds (older workflow first, then arrival).

Tenants without a tenant share one account (``None``). Off (``ES_SCHED_DISPATCH_FAIR_SHARE``
false), every eligible tenant ranks the same and a level is the old single order.

A level keeps one heap per tenant: the chooser (``TenantOrder``) ranks each tenant, or skips
it (None) while it is at its concurrency quota (``limits.Limits.tenant_full``), so one tenant at
its quota never holds back another's tasks behind it.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from es_sched.dispatch.core.queues import ReadyTask

# (rank, workflow start, seq, task): rank 0 is a handed-back task, at the head of its level
Entry = tuple[int, float, int, "ReadyTask"]
# A tenant's rank within a level (lower first); None: not eligible now (at its quota)
TenantOrder = Callable[[str | None], float | None]


class Level:
    """One priority level of a task type: a heap per tenant, merged by a ``TenantOrder``."""

    def __init__(self) -> None:
        self.heaps: dict[str | None, list[Entry]] = {}
        self.size = 0

    def push(self, entry: Entry) -> None:
        heapq.heappush(self.heaps.setdefault(entry[3].tenant, []), entry)
        self.size += 1

    def head(self, order: TenantOrder | None = None) -> Entry | None:
        """The entry that goes next: a handed-back one first, then the best-ranked eligible
        tenant's head, ties in the old order (older workflow, then arrival)."""
        best: tuple[int, float, float, int] | None = None
        found: Entry | None = None
        for tenant, heap in self.heaps.items():
            if not heap:
                continue
            rank = 0.0 if order is None else order(tenant)
            if rank is None:
                continue
            entry = heap[0]
            key = (entry[0], rank, entry[1], entry[2])
            if best is None or key < best:
                best, found = key, entry
        return found

    def pop(self, order: TenantOrder | None = None) -> Entry | None:
        entry = self.head(order)
        return None if entry is None else self.pop_tenant(entry[3].tenant)

    def pop_tenant(self, tenant: str | None) -> Entry:
        """The head of ``tenant``'s own order (one ``head`` chose before)."""
        heap = self.heaps[tenant]
        entry = heapq.heappop(heap)
        if not heap:
            del self.heaps[tenant]
        self.size -= 1
        return entry

    def remove(self, task: object) -> Entry | None:
        """Take ``task``'s entry out wherever it sits in its tenant's order (an SLA escalation
        moves it to a lower level, ``queues.TypeQueue.escalate``); None: not here."""
        tenant = getattr(task, "tenant", None)
        heap = self.heaps.get(tenant)
        at = None if heap is None else next((i for i, e in enumerate(heap) if e[3] is task), None)
        if heap is None or at is None:
            return None
        entry = heap[at]
        heap[at] = heap[-1]
        heap.pop()
        heapq.heapify(heap)
        if not heap:
            del self.heaps[tenant]
        self.size -= 1
        return entry

    def entries(self) -> Iterator[Entry]:
        for heap in self.heaps.values():
            yield from heap

    def __len__(self) -> int:
        return self.size


@dataclass
class FairShare:
    """Weights per tenant and, per pool, the virtual time and each tenant's last finish tag."""

    enabled: bool = True
    weights: dict[str, float] = field(default_factory=dict)  # tenant -> weight (config)
    virtual: dict[str, float] = field(default_factory=dict)  # pool -> virtual time
    finish: dict[tuple[str, str | None], float] = field(default_factory=dict)

    def set_weight(self, tenant: str, weight: float | None) -> None:
        if weight is None:
            self.weights.pop(tenant, None)
        else:
            self.weights[tenant] = weight

    def weight(self, tenant: str | None) -> float:
        return self.weights.get(tenant, 1.0) if tenant is not None else 1.0

    def tag(self, pool: str, tenant: str | None) -> float:
        """Where ``tenant``'s next start in ``pool`` begins: never before the pool's virtual
        time, so idleness banks no credit."""
        return max(self.finish.get((pool, tenant), 0.0), self.virtual.get(pool, 0.0))

    def charge(self, pool: str, tenant: str | None) -> None:
        """``tenant`` started a task in ``pool``: the pool's virtual time moves to that start,
        and the tenant's next start is ``1 / weight`` later."""
        start = self.tag(pool, tenant)
        self.virtual[pool] = start
        self.finish[(pool, tenant)] = start + 1.0 / self.weight(tenant)

    def order(self, pool: str, full: Callable[[str | None], bool]) -> TenantOrder:
        """The ``TenantOrder`` of ``pool``: the tenant's tag (0 for all when off), None while
        ``full`` (at its concurrency quota)."""

        def rank(tenant: str | None) -> float | None:
            if full(tenant):
                return None
            return self.tag(pool, tenant) if self.enabled else 0.0

        return rank


def memo(order: TenantOrder) -> TenantOrder:
    """``order`` asked once per tenant: for a stretch in which no task starts."""
    known: dict[str | None, float | None] = {}

    def rank(tenant: str | None) -> float | None:
        if tenant not in known:
            known[tenant] = order(tenant)
        return known[tenant]

    return rank
