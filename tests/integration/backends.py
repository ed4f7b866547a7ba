"""Where the contract suite finds its services: the local stack, or testcontainers.

The same tests run against every backend. ``local`` uses the endpoints from ``ES_SCHED_*``
settings (what ``es-sched stack up`` started); ``testcontainers`` starts Kafka (KRaft),
PostgreSQL 15 and Elasticsearch 8 in Docker and is skipped, with the reason, when no Docker
engine answers.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass

from testcontainers.community.elasticsearch import ElasticSearchContainer
from testcontainers.community.kafka import KafkaContainer
from testcontainers.community.postgres import PostgresContainer

from es_sched.settings import load_settings
from es_sched.stack.compose import engine_available


@dataclass(frozen=True)
class Backend:
    name: str
    kafka_bootstrap: str
    pg_url: str  # SQLAlchemy URL with the psycopg 3 driver
    search_url: str
    search_flavor: str


NO_DOCKER = "no Docker engine answers `docker info`; the testcontainers backend needs one"


def local() -> Backend:
    s = load_settings()
    return Backend(
        "local", s.kafka.bootstrap_servers, s.postgres.url, s.search.url, s.search.flavor
    )


@contextmanager
def testcontainers() -> Iterator[Backend]:
    with ExitStack() as stack:
        kafka = stack.enter_context(KafkaContainer().with_kraft())
        pg = stack.enter_context(PostgresContainer("postgres:15", driver="psycopg"))
        es = stack.enter_context(
            ElasticSearchContainer("docker.elastic.co/elasticsearch/elasticsearch:8.15.3")
        )
        yield Backend(
            "testcontainers",
            kafka.get_bootstrap_server(),
            pg.get_connection_url(),
            f"http://{es.get_container_host_ip()}:{es.get_exposed_port(9200)}",
            "elasticsearch",
        )


__all__ = ["NO_DOCKER", "Backend", "engine_available", "local", "testcontainers"]
