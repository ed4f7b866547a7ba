"""The same stack through ``docker compose``, for machines where a Docker engine answers.

Compose runs Apache Kafka (KRaft), PostgreSQL and Elasticsearch 8, or OpenSearch 2 under the
``opensearch`` profile when ``ES_SCHED_SEARCH_FLAVOR=opensearch``. Ports match the local stack's
defaults, so clients need no other settings.
"""

from __future__ import annotations

import shutil
import subprocess

from es_sched.settings import Settings
from es_sched.stack import process as proc


def engine_available(timeout_s: float = 5.0) -> bool:
    """True when a Docker engine answers ``docker info`` (a client alone is not enough)."""
    if shutil.which("docker") is None:
        return False
    try:
        done = subprocess.run(
            ["docker", "info", "--format", "{{.ServerVersion}}"],
            capture_output=True,
            timeout=timeout_s,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0 and bool(done.stdout.strip())


def _base(settings: Settings) -> list[str]:
    argv = ["docker", "compose", "-f", str(settings.stack.compose_file), "-p", "es-sched"]
    if settings.search.flavor == "opensearch":
        argv += ["--profile", "opensearch"]
    return argv


def search_service(settings: Settings) -> str:
    return "opensearch" if settings.search.flavor == "opensearch" else "elasticsearch"


def up(settings: Settings) -> None:
    services = ["kafka", "postgres", search_service(settings)]
    timeout = str(int(settings.stack.ready_timeout_s))
    proc.run(
        [*_base(settings), "up", "-d", "--wait", "--wait-timeout", timeout, *services],
        what="docker compose up",
    )


def down(settings: Settings) -> None:
    proc.run([*_base(settings), "down"], what="docker compose down")
