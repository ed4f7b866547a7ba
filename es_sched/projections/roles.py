"""The two projector roles as ``es-sched run`` builds them (``--role projector-pg`` and
``--role projector-search``): a store, migrated or created at start, under the shared loop."""

from __future__ import annotations

import threading

from es_sched.metrics import Registry
from es_sched.projections.postgres.store import PgStore
from es_sched.projections.projector import Projector
from es_sched.settings import Settings


class PgProjector:
    def __init__(self, settings: Settings, registry: Registry | None = None) -> None:
        self.store = PgStore(settings)
        self.projector = Projector(settings, self.store, registry)

    def run(self, stop: threading.Event) -> None:
        self.projector.retry(self.store.ensure, stop, poll=False)  # waits for PostgreSQL
        self.projector.run(stop)


class SearchProjector:
    def __init__(self, settings: Settings, registry: Registry | None = None) -> None:
        from es_sched.projections.search.store import SearchStore  # noqa: PLC0415

        self.store = SearchStore(settings)
        self.projector = Projector(settings, self.store, registry)

    def run(self, stop: threading.Event) -> None:
        self.projector.retry(self.store.ensure, stop, poll=False)
        self.projector.run(stop)
