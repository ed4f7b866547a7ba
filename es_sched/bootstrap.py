"""The composition root: the one place that builds es-sched's parts from settings.

Entry points (the CLI, benchmarks, tests that run roles in-process) ask here for a role, a
script engine or a store; nothing else picks an implementation. Nothing connects at import
time: a role opens its Kafka clients in ``run``, a store on first use. The Kafka roles get
their producers and group consumers from one ``KafkaClients``; a test entry point passes its
own (clients that fail on purpose) instead of the role carrying a test hook.

Roles and stores are imported where they are built, so ``es-sched worker`` or ``es-sched
submit`` do not load SQLAlchemy or the search clients; import-linter still sees every import.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from es_sched.domain.scripts import ScriptEngine
from es_sched.errors import ConfigError
from es_sched.kafka.clients import KafkaClients
from es_sched.kafka.connection import ROLE_PRINCIPALS, connection
from es_sched.metrics import Registry
from es_sched.settings import ScriptSettings, Settings, load_script_settings

if TYPE_CHECKING:
    from fastapi import FastAPI

    from es_sched.api.keys import Keys, PgKeys
    from es_sched.api.services import Services as ApiServices
    from es_sched.commands.client import CommandClient
    from es_sched.kafka.stats import StatsView
    from es_sched.projections.postgres.store import PgStore
    from es_sched.projections.search.store import SearchStore
    from es_sched.projections.store import Store

ROLES = (
    "decider",
    "timers",
    "retry",
    "dispatcher",
    "projector-pg",
    "projector-search",
    "analytics",
)
# Run only when named (``es-sched run --role api``): the HTTP API listens on a port, which a
# development ``es-sched run`` of every role must not take by surprise.
OPTIONAL_ROLES = ("api",)


class Role(Protocol):
    """A long-running role: ``run`` returns when ``stop`` is set, or raises ``EsSchedError``."""

    def run(self, stop: threading.Event) -> None: ...


def script_engine(settings: ScriptSettings | None = None) -> ScriptEngine:
    """QuickJS for INLINE tasks and javascript SWITCH evaluators, in a killable child process
    with time and memory limits (ADR 76); the environment's settings when none are given."""
    from es_sched.scripting.sandbox import ProcessSandbox  # noqa: PLC0415

    s = settings or load_script_settings()
    return ProcessSandbox(s.time_limit_ms, s.memory_limit_bytes, s.max_result_bytes, s.grace_s)


def kafka_clients(settings: Settings) -> KafkaClients:
    """The factory every Kafka role makes its producers and group consumers with."""
    return KafkaClients(connection(settings.kafka))


def as_principal(settings: Settings, role_name: str) -> Settings:
    """``settings`` whose Kafka clients authenticate as ``role_name``'s principal (ADR 72): each
    role ``es-sched run`` hosts, in one process or several, uses its own credentials, so the
    broker's ACLs hold a role to what that role does. Every client a role makes reads its
    connection from these settings, including the readers it builds deep inside."""
    from dataclasses import replace  # noqa: PLC0415

    principal = ROLE_PRINCIPALS.get(role_name, role_name)
    return replace(settings, kafka=settings.kafka.model_copy(update={"principal": principal}))


def command_client(settings: Settings) -> CommandClient:
    """The command side as upstream services and the CLI use it (validated, idempotent)."""
    from es_sched.commands.client import CommandClient  # noqa: PLC0415

    return CommandClient(settings)


def pg_store(settings: Settings, schema: str | None = None) -> PgStore:
    """The PostgreSQL read model (``schema``: another schema than the live one, for rebuilds)."""
    from es_sched.projections.postgres.store import PgStore  # noqa: PLC0415

    return PgStore(settings) if schema is None else PgStore(settings, schema=schema)


def search_store(settings: Settings) -> SearchStore:
    """The search read model on the flavour ``ES_SCHED_SEARCH_FLAVOR`` names."""
    from es_sched.projections.search.store import SearchStore  # noqa: PLC0415

    return SearchStore(settings)


def store(settings: Settings, target: str) -> Store:
    """A read model by name: ``pg`` or ``search``."""
    if target == "pg":
        return pg_store(settings)
    if target == "search":
        return search_store(settings)
    raise ConfigError(f"unknown read model {target!r}; choose pg or search")


def stats_view(settings: Settings) -> StatsView:
    """The analytics role's latest proposals, kept (ADR 64); connects when called."""
    from es_sched.kafka.stats import StatsView  # noqa: PLC0415
    from es_sched.kafka.topics import topics_for  # noqa: PLC0415

    return StatsView(connection(settings.kafka), topics_for(settings).stats)


def _decider(settings: Settings, registry: Registry, clients: KafkaClients) -> Role:
    from es_sched.runtime.decider import Decider  # noqa: PLC0415

    return Decider(
        settings,
        script_engine(settings.script),
        registry=registry,
        clients=clients,
        stats=lambda: stats_view(settings),  # learned run times: dynamic timeouts (ADR 65)
    )


def _timers(settings: Settings, registry: Registry, clients: KafkaClients) -> Role:
    from es_sched.runtime.timer_service import TimerService  # noqa: PLC0415

    return TimerService(settings, registry=registry, clients=clients)


def _retry(settings: Settings, registry: Registry, clients: KafkaClients) -> Role:
    from es_sched.runtime.retry_relay import RetryRelay  # noqa: PLC0415

    return RetryRelay(settings, registry=registry, clients=clients)


def _dispatcher(settings: Settings, registry: Registry, clients: KafkaClients) -> Role:
    from es_sched.dispatch.dispatcher import Dispatcher  # noqa: PLC0415

    return Dispatcher(settings, registry=registry, clients=clients)


def _projector_pg(settings: Settings, registry: Registry, clients: KafkaClients) -> Role:
    from es_sched.projections.roles import ProjectorRole  # noqa: PLC0415

    return ProjectorRole(settings, pg_store(settings), registry, clients)


def _projector_search(settings: Settings, registry: Registry, clients: KafkaClients) -> Role:
    from es_sched.projections.roles import ProjectorRole  # noqa: PLC0415

    return ProjectorRole(settings, search_store(settings), registry, clients)


def _analytics(settings: Settings, registry: Registry, clients: KafkaClients) -> Role:
    from es_sched.analytics import Analytics  # noqa: PLC0415

    del clients  # faust brings its own (aiokafka) clients
    return Analytics(settings, registry)


def api_services(settings: Settings) -> ApiServices:
    """What the HTTP API's routes use (ADR 23); each client is built on first use."""
    from es_sched.api.auth import Authenticator  # noqa: PLC0415
    from es_sched.api.services import Lazy, Services  # noqa: PLC0415
    from es_sched.api.throttle import LoginThrottle, PgFailures  # noqa: PLC0415

    pg_keys = Lazy(lambda: key_store(settings))
    keys: Lazy[Keys] = Lazy(pg_keys.get)
    # counted in PostgreSQL beside the keys, so every API process counts the same failures
    failures = Lazy(lambda: PgFailures(pg_keys.get()))
    throttle = LoginThrottle(settings.api, failures.get)
    return Services(
        settings=settings,
        pg=Lazy(lambda: api_pg_store(settings)),
        search=Lazy(lambda: search_store(settings)),
        commands=Lazy(lambda: command_client(settings)),
        auth=Authenticator(settings.api, keys, throttle=throttle),
        scripts=Lazy(lambda: script_engine(settings.script)),
    )


def announce_api(settings: Settings, svc: ApiServices) -> None:
    """Publish this API process's liveness record (role ``api``, keyed by its host and pid)
    until ``svc.close`` (ADR 61); refused beside a live process of another deployment."""
    from es_sched.kafka import roster  # noqa: PLC0415

    keys = [("api", roster.process_instance())]
    reader = roster.claim(settings, keys, replace=False)
    lost = logging.getLogger(__name__).error
    svc.beacon.put(roster.Beacon(settings, keys, Registry(), reader, lost).start())


def api_pg_store(settings: Settings) -> PgStore:
    """The read model as the API reads it: a pool sized for its threads (ADR 23)."""
    from es_sched.projections.postgres.store import PgStore  # noqa: PLC0415

    a = settings.api
    reading = reader(settings)
    return PgStore(reading, pool_size=a.pg_pool_size, max_overflow=a.pg_max_overflow)


def reader(settings: Settings) -> Settings:
    """``settings`` whose read model connections use the read-only role (ADR 73): what the
    API's and the CLI's queries run as; projectors and migrations keep the writer."""
    from dataclasses import replace  # noqa: PLC0415

    return replace(settings, postgres=settings.postgres.for_reading())


def key_store(settings: Settings) -> PgKeys:
    """The API keys, in ``<ES_SCHED_PG_SCHEMA_NAME>_auth`` (ADR 25): a rebuild of the read
    model replaces its schema, the keys must outlive that."""
    from sqlalchemy import create_engine  # noqa: PLC0415

    from es_sched.api.keys import PgKeys  # noqa: PLC0415

    engine = create_engine(
        settings.postgres.engine_url,
        pool_pre_ping=True,
        pool_size=2,
        connect_args={"connect_timeout": 5},
    )
    return PgKeys(engine, f"{settings.postgres.schema_name}_auth")


def with_api_host(settings: Settings, host: str) -> Settings:
    """``settings`` listening on ``host`` instead, validated again (auth off needs loopback)."""
    from dataclasses import replace  # noqa: PLC0415

    from pydantic import ValidationError  # noqa: PLC0415

    try:
        api = settings.api.model_validate({**settings.api.model_dump(), "host": host})
    except ValidationError as exc:
        raise ConfigError(f"invalid --host {host!r}: {exc.errors()[0]['msg']}") from None
    return replace(settings, api=api)


def api_app() -> FastAPI:
    """One API worker process's application, built from the environment's settings: uvicorn
    imports it by name in each process ``es-sched api --workers N`` starts (ADR 23)."""
    from es_sched.api.app import create_app  # noqa: PLC0415
    from es_sched.settings import load_settings  # noqa: PLC0415

    if not logging.getLogger().handlers:  # a spawned worker has not inherited the CLI's
        logging.basicConfig(
            level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
        )
    settings = as_principal(load_settings(), "api")
    svc = api_services(settings)
    announce_api(settings, svc)
    return create_app(svc)


def _api(settings: Settings, registry: Registry, clients: KafkaClients) -> Role:
    from es_sched.api.app import create_app  # noqa: PLC0415
    from es_sched.api.server import ApiServer  # noqa: PLC0415

    if settings.api.workers > 1:  # uvicorn's supervisor needs the main thread: es-sched api
        logging.getLogger(__name__).warning(
            "es-sched run serves the API in one process; ES_SCHED_API_WORKERS=%d applies to "
            "es-sched api",
            settings.api.workers,
        )
    return ApiServer(settings.api, create_app(api_services(settings)))


_BUILDERS: dict[str, Callable[[Settings, Registry, KafkaClients], Role]] = {
    "decider": _decider,
    "timers": _timers,
    "retry": _retry,
    "dispatcher": _dispatcher,
    "projector-pg": _projector_pg,
    "projector-search": _projector_search,
    "analytics": _analytics,
    "api": _api,
}


def role(
    name: str,
    settings: Settings,
    registry: Registry | None = None,
    clients: KafkaClients | None = None,
) -> Role:
    """One role of ``es-sched run``, wired from ``settings``; ``registry`` collects its metrics,
    ``clients`` (default: from the settings) makes its Kafka producers and group consumers."""
    builder = _BUILDERS.get(name)
    if builder is None:
        known = ", ".join(ROLES + OPTIONAL_ROLES)
        raise ConfigError(f"unknown role {name!r}; choose from {known}")
    settings = as_principal(settings, name)
    return builder(settings, registry or Registry(), clients or kafka_clients(settings))
