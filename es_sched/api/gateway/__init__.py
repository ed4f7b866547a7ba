"""The API process's gateway worker (``es_sched.workers.gateway``, ADR 23, ADR 24), and its
lease store on PostgreSQL (``store``).

``gateway_of(svc)`` builds the store and starts the gateway on the first worker call, once per
process (``Services.gateway``, which ``Services.close`` closes when the application shuts
down, stopping the gateway).
"""

from __future__ import annotations

from es_sched.api.gateway.store import GatewayStore
from es_sched.api.services import Services
from es_sched.workers import gateway
from es_sched.workers.gateway import Gateway

__all__ = ["Gateway", "GatewayStore", "gateway_of"]


def gateway_of(svc: Services, port: int | None = None) -> Gateway:
    """The process's gateway; ``port`` is the one the server listens on (the request's
    ``scope["server"]``: ``es-sched api --port`` does not change ``settings.api.port``)."""

    def build() -> Gateway:
        store = GatewayStore(svc.settings)
        store.ensure()
        return gateway.start(svc.settings, store, port)

    return svc.gateway.get(build)
