"""Readiness probes that ask each service a real question.

Kafka answers a metadata request that lists at least one broker, PostgreSQL answers ``SELECT 1``
as the es-sched role, and the search engine reports cluster health yellow or green. An open port
alone proves nothing. Each probe returns a ``Probe`` and never raises: driver errors become the
probe's ``detail``.
"""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
from dataclasses import dataclass

import psycopg
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from es_sched.kafka.connection import KafkaConnection


@dataclass(frozen=True)
class Probe:
    healthy: bool
    detail: str


def kafka(bootstrap_servers: KafkaConnection, timeout_s: float = 3.0, brokers: int = 1) -> Probe:
    """Healthy when the metadata lists at least ``brokers`` brokers (a cluster's every node)."""
    admin = AdminClient(
        bootstrap_servers.config(
            **{
                "socket.connection.setup.timeout.ms": int(timeout_s * 1000),
                # Refused connections while the broker boots are expected; keep librdkafka
                # quiet.
                "log_level": 0,
            }
        )
    )
    try:
        meta = admin.list_topics(timeout=timeout_s)
    except KafkaException as exc:
        return Probe(False, f"metadata request failed: {exc.args[0]}")
    if len(meta.brokers) < max(1, brokers):
        return Probe(False, f"metadata lists {len(meta.brokers)} of {brokers} broker(s)")
    return Probe(True, f"{len(meta.brokers)} broker(s)")


def postgres(dsn: str, timeout_s: float = 3.0) -> Probe:
    try:
        with psycopg.connect(dsn, connect_timeout=max(1, int(timeout_s))) as conn:
            row = conn.execute("SELECT current_setting('server_version')").fetchone()
    except psycopg.Error as exc:
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return Probe(False, first_line)
    version = str(row[0]).split()[0] if row else "?"
    return Probe(True, f"PostgreSQL {version}")


def search(url: str, timeout_s: float = 3.0) -> Probe:
    try:
        with urllib.request.urlopen(f"{url}/_cluster/health", timeout=timeout_s) as resp:  # noqa: S310 - URL validated by SearchSettings
            body = json.loads(resp.read())
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return Probe(False, f"cluster health failed: {exc}")
    status = body.get("status")
    if status not in ("yellow", "green"):
        return Probe(False, f"cluster health is {status}")
    return Probe(True, f"cluster {status}")


def port_open(host: str, port: int, timeout_s: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False
