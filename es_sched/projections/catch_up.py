"""Catching a store up with the log in partition groups, one projector process per group.

A rebuild projects the whole log into fresh tables or indices; one projector does it on one
core, bound by decoding and folding (ADR 32). ``catch_up`` splits the events topic's partitions
into groups and runs ``Projector.catch_up`` over each group in a forked worker with a store of
its own (``make_store``). The groups are disjoint and a workflow lives on one partition, so the
workers write disjoint rows and checkpoints: every obligation of the store port holds per
worker as it holds for one projector (rows and checkpoints together, version-guarded, offsets
after the write), and the result is the one projector's.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context

from es_sched.projections.projector import Projector
from es_sched.projections.replay import events_total, parallelism, partitions
from es_sched.projections.store import Store
from es_sched.settings import Settings

Progress = Callable[[int, int], None]


def catch_up(
    settings: Settings,
    make_store: Callable[[], Store],
    group: str,
    progress: Progress | None = None,
    workers: int | None = None,
) -> int:
    """Records projected. ``make_store`` builds the store (in each worker: it must pickle, e.g.
    ``functools.partial(PgStore, settings, schema=...)``); ``workers`` None: one per core
    when the log is large enough (``replay.parallelism``)."""
    parts = partitions(settings)
    total = events_total(settings)
    workers = max(1, min(parallelism(total) if workers is None else workers, len(parts)))
    if workers == 1:
        return _one(settings, make_store, group, parts, progress)
    groups = [parts[i::workers] for i in range(workers)]
    read = 0
    # Forked (no imports to repeat); a worker uses none of this process's clients or
    # connections, it opens its own through ``make_store`` and its projector.
    with ProcessPoolExecutor(workers, mp_context=get_context("fork")) as pool:
        futures = [pool.submit(_one, settings, make_store, group, g, None) for g in groups]
        for future in futures:
            read += future.result()
            if progress is not None:
                progress(read, max(total, read))
    return read


def _one(
    settings: Settings,
    make_store: Callable[[], Store],
    group: str,
    parts: list[int],
    progress: Progress | None,
) -> int:
    store = make_store()
    try:
        return Projector(settings, store, group=group).catch_up(progress, only=parts)
    finally:
        store.close()
