"""The gateway worker: HTTP workers lease through it (ADR 23, ADR 24).

``worker.Gateway`` is an API process's one worker on the dispatcher's side; ``demand`` keeps
what HTTP workers asked it for and how long it waits for them; ``leases`` is what any API
process needs to accept an update for a task another one handed out (``LeaseStore``, the store
they share); ``updates`` turns an update into worker reports; ``slot`` gives each API process of
a host and port its own worker id. ``start`` builds and starts one gateway; the API process
calls it on its first worker call (``es_sched.api.gateway.gateway_of``) and closes it when the
application shuts down.
"""

from __future__ import annotations

from es_sched.settings import Settings
from es_sched.workers.gateway import slot
from es_sched.workers.gateway.leases import HeldLease, LeaseStore
from es_sched.workers.gateway.worker import Gateway, gateway_id

__all__ = ["Gateway", "HeldLease", "LeaseStore", "start"]


def start(settings: Settings, store: LeaseStore, port: int | None = None) -> Gateway:
    """A started gateway on ``store``, under this process's slot of the worker id for
    ``port`` (the one the server listens on: ``es-sched api --port`` does not change
    ``settings.api.port``)."""
    worker_id, held = slot.claim(gateway_id(settings, port))
    gateway = Gateway(settings, store, worker_id, slot=held)
    gateway.start()
    return gateway
