"""HTTP workers lease through a gateway worker (ADR 23, ADR 24).

``worker.Gateway`` is the API process's one worker on the dispatcher's side; ``store`` keeps
what any API process needs to accept an update for a task another one handed out; ``updates``
turns an update into worker reports. ``gateway_of(svc)`` builds and starts the gateway on the
first worker call and keeps it in ``svc.extras["gateway"]``, whose ``close`` stops it when the
application shuts down; ``slot`` gives each API process of a host and port its own worker id.
"""

from __future__ import annotations

import threading

from es_sched.api.gateway import slot
from es_sched.api.gateway.store import GatewayStore
from es_sched.api.gateway.worker import Gateway, gateway_id
from es_sched.api.services import Services

__all__ = ["Gateway", "GatewayStore", "gateway_of"]
_building = threading.Lock()


def gateway_of(svc: Services, port: int | None = None) -> Gateway:
    """The process's gateway; ``port`` is the one the server listens on (the request's
    ``scope["server"]``: ``es-sched api --port`` does not change ``settings.api.port``)."""
    found = svc.extras.get("gateway")
    if isinstance(found, Gateway):
        return found
    with _building:
        found = svc.extras.get("gateway")
        if not isinstance(found, Gateway):
            store = GatewayStore(svc.settings)
            store.ensure()
            worker_id, held = slot.claim(gateway_id(svc.settings, port))
            found = Gateway(svc.settings, store, worker_id, slot=held)
            found.start()
            svc.extras["gateway"] = found
        return found
