"""``es-sched projections rebuild --target search``: a new generation of indices filled from
offset 0, the aliases swapped atomically, then one more catch-up (see ``rebuild``)."""

from __future__ import annotations

import time
from functools import partial

from es_sched.projections.catch_up import catch_up
from es_sched.projections.postgres.rebuild import Progress, Rebuilt
from es_sched.projections.projector import Projector
from es_sched.projections.search.store import SearchStore
from es_sched.settings import Settings


def rebuild_search(settings: Settings, progress: Progress | None = None) -> Rebuilt:
    started = time.monotonic()
    live = SearchStore(settings)
    live.ensure()
    retired = live.current_generation() or ""
    fresh = live.fresh_generation()
    group = f"{settings.kafka.topic_prefix}-projector-{fresh.name}"
    assert fresh.generation is not None
    # The bulk of the log in partition groups, one process each (ADR 32).
    make = partial(SearchStore, settings, fresh.generation)
    records = catch_up(settings, make, group, progress)
    live.switch_to(fresh.generation)
    # What the live projector wrote into the old generation after our last read: again, here.
    records += Projector(settings, fresh, group=group).catch_up(progress)
    live.close()
    return Rebuilt("search", records, time.monotonic() - started, retired)
