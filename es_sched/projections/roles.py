"""A projector role as ``es-sched run`` builds it (``--role projector-pg`` and ``--role
projector-search``): the store it is given (``es_sched.bootstrap`` picks it), migrated or created
at start, under the shared projector loop."""

from __future__ import annotations

import threading

from es_sched.kafka.clients import KafkaClients
from es_sched.metrics import Registry
from es_sched.projections.projector import Projector
from es_sched.projections.store import Store
from es_sched.settings import Settings


class ProjectorRole:
    def __init__(
        self,
        settings: Settings,
        store: Store,
        registry: Registry | None = None,
        clients: KafkaClients | None = None,
    ) -> None:
        self.store = store
        self.projector = Projector(settings, store, registry, clients=clients)

    def run(self, stop: threading.Event) -> None:
        self.projector.retry(self.store.ensure, stop, poll=False)  # waits for the store
        self.projector.run(stop)
