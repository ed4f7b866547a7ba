"""``es-sched replay --verify`` where the fold is: each partition group's process compares its
own workflows with the stores and the changelog, and sends back counts and mismatches.

A workflow, its events, its changelog snapshots and its rows all belong to one partition
group, so a group's process compares them itself (ADR 43) rather than sending every folded
state back to a parent to compare (ADR 32's first design, whose pickling and serial comparison
dominated a verify): the comparisons are spread over the processes and nothing but figures and
mismatches crosses a process boundary. ``es-sched replay`` without ``--verify`` takes the same
path with no target: only the fold's figures come back. What is compared, and how, is
``replay.verify_store`` and ``replay.verify_changelog``; ``replay.verify_all`` is for callers
that hold a replay already (``audit check``). The changelog needs no fold to be read
(``replay.read_changelog``), so a group reads it on a thread while it folds its events, and
each folded workflow's rows are made once for all targets (``Replayed.rows``;
``bench/results/archive/replay_verify_overlap.json``).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from multiprocessing import get_context

from es_sched.projections.postgres import queries as pg_queries
from es_sched.projections.postgres.store import PgStore
from es_sched.projections.replay import (
    Mismatch,
    Progress,
    _replay,
    comparable_ids,
    events_total,
    parallelism,
    partitions,
    read_changelog,
    verify_changelog,
    verify_store,
)
from es_sched.projections.store import Store
from es_sched.settings import Settings
from es_sched.tuning import tune_gc

# Partition groups per core when comparing: a group's process waits on PostgreSQL, the search
# engine and the broker for part of its life, so one per core leaves the host partly idle; two
# fill it, three gain nothing more (bench/results/archive/replay_verify_per_core.json and
# replay_verify_3_per_core.json).
VERIFY_PER_CORE = 2
StoreFor = Callable[[str], Store]  # a target ("pg", "search") -> its store; picklable to fork


@dataclass
class Verified:
    """What ``replay --verify`` found: the fold's figures and each target's mismatches."""

    events: int = 0
    refusals: int = 0
    workflows: int = 0
    compared: int = 0  # workflows whose whole history the replay saw
    statuses: dict[str, int] = field(default_factory=dict)
    found: dict[str, list[Mismatch]] = field(default_factory=dict)  # target -> its mismatches
    seconds: float = 0.0

    def mismatches(self) -> list[Mismatch]:
        """Every mismatch, in the order of the targets asked for."""
        return [m for found in self.found.values() for m in found]

    def add(self, other: Verified) -> None:
        self.events, self.refusals = self.events + other.events, self.refusals + other.refusals
        self.workflows, self.compared = (
            self.workflows + other.workflows,
            self.compared + other.compared,
        )
        self.statuses = dict(Counter(self.statuses) + Counter(other.statuses))
        for target, found in other.found.items():
            self.found.setdefault(target, []).extend(found)


def replay_verified(
    settings: Settings,
    targets: tuple[str, ...],
    store_for: StoreFor,
    until: datetime | None = None,
    workflow_id: str | None = None,
    progress: Progress | None = None,
    workers: int | None = None,
) -> Verified:
    """Fold the log (to ``until``, for ``workflow_id`` or all) and compare every workflow whose
    whole history was folded with ``targets`` ("pg", "search", "changelog"; none: the fold's
    figures only, which is ``es-sched replay`` without ``--verify``). ``workers``:
    processes, one partition group each (None: ``replay.parallelism`` for the log's size,
    ``VERIFY_PER_CORE`` per core when comparing).
    Without ``workflow_id`` or ``until``, PostgreSQL must also hold no workflow the log lacks:
    its row count is compared once, here. An error of a target is raised after all ended."""
    tune_gc(settings.runtime.gc_young_threshold)  # folds the whole log: es_sched.tuning
    started, parts = time.monotonic(), partitions(settings)
    if workers is None:  # comparing, a group waits on the stores: two per core fill the wait
        per_core = VERIFY_PER_CORE if targets else 1
        workers = 1 if workflow_id is not None else parallelism(events_total(settings), per_core)
    workers = max(1, min(workers, len(parts)))
    out = Verified(found={t: [] for t in targets})
    if workers == 1:
        out.add(_group(settings, parts, targets, store_for, until, workflow_id, progress))
    else:
        groups = [parts[i::workers] for i in range(workers)]
        # Forked, as replay's workers (ADR 32): no client or connection is open here yet.
        with ProcessPoolExecutor(workers, mp_context=get_context("fork")) as pool:
            futures = [
                pool.submit(_group, settings, g, targets, store_for, until, workflow_id, None)
                for g in groups
            ]
            for future in futures:
                out.add(future.result())
                if progress is not None:
                    progress(out.events + out.refusals)
    if "pg" in targets and workflow_id is None and out.compared == out.workflows:
        store = store_for("pg")
        try:
            total = pg_queries.total_workflows(store.engine) if isinstance(store, PgStore) else None
        finally:
            store.close()
        if total is not None and total != out.workflows:
            out.found["pg"].append(Mismatch("pg", "workflow", "*", "count", out.workflows, total))
    out.seconds = time.monotonic() - started
    return out


def _group(
    settings: Settings,
    parts: list[int],
    targets: tuple[str, ...],
    store_for: StoreFor,
    until: datetime | None,
    workflow_id: str | None,
    progress: Progress | None,
) -> Verified:
    """One partition group: its fold, then each target compared on a thread of its own (one's
    waits on the database, the engine or the broker overlap the others' work). The changelog
    needs no fold to be read, so it is read while the events are folded: it was the last
    target to end, and the host sat a third idle during a verify (``bench/replay.py``)."""
    with ThreadPoolExecutor(len(targets) + 1, thread_name_prefix="verify") as pool:
        snapshots = pool.submit(read_changelog, settings, parts) if "changelog" in targets else None
        done = _replay(settings, parts, until, workflow_id, progress)
        ids = comparable_ids(done, until)

        def one(target: str) -> list[Mismatch]:
            if target == "changelog":
                assert snapshots is not None
                return verify_changelog(settings, done, set(ids), snapshots=snapshots.result())
            store = store_for(target)
            try:
                return verify_store(done, store, ids)
            finally:
                store.close()

        futures = {target: pool.submit(one, target) for target in targets}
        found = {target: future.result() for target, future in futures.items()}
    return Verified(
        events=done.events,
        refusals=done.refusals,
        workflows=len(done.states),
        compared=len(ids),
        statuses=dict(Counter(st.status for st in done.states.values())),
        found=found,
    )
