"""Settings for one test's private corner of the shared stack.

A test works under a fresh name (``unique_name``): its topic prefix, its PostgreSQL schema and
its search index prefix. ``private_vars`` gives the ``ES_SCHED_*`` variables that say so, for
the child processes a test starts; ``settings_with`` builds this process's ``Settings`` from the
same variables (the endpoints and everything not named come from the environment, as for any
es-sched process), so a test and its children never disagree.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from pydantic_settings import BaseSettings

from es_sched.kafka.connection import KafkaConnection, connection
from es_sched.settings import (
    AnalyticsSettings,
    ApiSettings,
    DispatchSettings,
    KafkaSettings,
    MediaSettings,
    PostgresSettings,
    RuntimeSettings,
    SearchSettings,
    Settings,
    SlaSettings,
    StackSettings,
    SystemSettings,
)

SECTIONS: dict[str, type[BaseSettings]] = {
    "kafka": KafkaSettings,
    "postgres": PostgresSettings,
    "search": SearchSettings,
    "stack": StackSettings,
    "runtime": RuntimeSettings,
    "dispatch": DispatchSettings,
    "media": MediaSettings,
    "api": ApiSettings,
    "system": SystemSettings,
    "analytics": AnalyticsSettings,
    "sla": SlaSettings,
}
BOOTSTRAP = KafkaSettings().bootstrap_servers
HANDED_OUT: set[str] = set()  # every name unique_name gave this process (topic cleanup)


def kafka_connection(bootstrap: str = BOOTSTRAP, principal: str = "admin") -> KafkaConnection:
    """A test's or benchmark's own Kafka clients to ``bootstrap``, secured as this environment's
    ``ES_SCHED_KAFKA_*`` settings say (ADR 72), as the admin principal: a test reads and writes
    every topic it checks, whatever the roles under test may."""
    return connection(KafkaSettings(bootstrap_servers=bootstrap), principal)


def unique_name() -> str:
    """A name no other test uses; valid as a topic prefix, a schema and an index prefix."""
    name = f"t{uuid.uuid4().hex[:12]}"
    HANDED_OUT.add(name)
    return name


def private_vars(
    prefix: str, partitions: int = 4, assignment_partitions: int = 4, bootstrap: str = BOOTSTRAP
) -> dict[str, str]:
    """The ``ES_SCHED_*`` variables of a test's private topics, schema and indices (on the
    shared broker unless ``bootstrap`` names a private one)."""
    return {
        "ES_SCHED_KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "ES_SCHED_KAFKA_TOPIC_PREFIX": prefix,
        "ES_SCHED_KAFKA_PARTITIONS": str(partitions),
        "ES_SCHED_DISPATCH_ASSIGNMENT_PARTITIONS": str(assignment_partitions),
        "ES_SCHED_PG_SCHEMA_NAME": prefix,
        "ES_SCHED_SEARCH_INDEX_PREFIX": f"es-sched-{prefix}",
    }


def settings_with(env: Mapping[str, str]) -> Settings:
    """``load_settings()`` as a process with ``env`` added to its environment would see it.

    A variable under a section's prefix that names no setting of it raises, as a typo in a
    test should; variables under no section's prefix are the children's business and ignored.
    """
    sections: dict[str, Any] = {}
    for name, cls in SECTIONS.items():
        prefix = str(cls.model_config.get("env_prefix", ""))
        given: dict[str, Any] = {
            k.removeprefix(prefix).lower(): v for k, v in env.items() if k.startswith(prefix)
        }
        sections[name] = cls(**given)
    return Settings(**sections)


def private_settings(
    prefix: str | None = None, partitions: int = 4, assignment_partitions: int = 4, **env: str
) -> Settings:
    """``Settings`` under ``prefix`` (default: a fresh name), plus the ``ES_SCHED_*`` of ``env``."""
    vars_ = private_vars(prefix or unique_name(), partitions, assignment_partitions)
    return settings_with({**vars_, **env})


def vars_of(settings: Settings) -> dict[str, str]:
    """The private variables of ``settings`` (built by ``private_settings``), for a child."""
    return private_vars(
        settings.kafka.topic_prefix,
        settings.kafka.partitions,
        settings.dispatch.assignment_partitions,
    )
