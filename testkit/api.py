"""The HTTP API as a user runs it: ``es-sched api --port P`` as a child process with a test's
private topics, schema and indices (``Env``), next to the roles that feed its read models.

``api(env)`` yields an ``Api`` whose ``url`` answers once ``/openapi.json`` does; ``http`` is an
httpx client on it. Auth is off unless the test passes ``ES_SCHED_API_AUTH=on`` (the auth tests
do); off is allowed because the server listens on 127.0.0.1 only.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import httpx
from sqlalchemy import create_engine, text

from testkit.net import free_port
from testkit.runtime import Env, Role
from testkit.wait import wait_until


@dataclass
class Api:
    role: Role
    url: str
    http: httpx.Client


def _answers(url: str) -> bool:
    try:
        return httpx.get(f"{url}/openapi.json", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


@contextmanager
def keyed_env() -> Iterator[Env]:
    """An ``Env`` whose API keys schema (``<prefix>_auth``, which outlives the read model) is
    dropped afterwards."""
    env = Env()
    yield env
    engine = create_engine(env.settings.postgres.url)
    with engine.begin() as conn:
        conn.execute(text(f'DROP SCHEMA IF EXISTS "{env.prefix}_auth" CASCADE'))
    engine.dispose()


def launch(env: Env, **extra_env: str) -> tuple[Role, str]:
    """``es-sched api`` started, not yet waited for (a test starting other roles meanwhile)."""
    port = free_port()
    role = Role(
        env,
        "api",
        argv=["api", "--port", str(port)],
        **{"ES_SCHED_API_AUTH": "off", **extra_env},
    )
    return role, f"http://127.0.0.1:{port}"


@contextmanager
def api(env: Env, **extra_env: str) -> Iterator[Api]:
    with serving(launch(env, **extra_env)) as served:
        yield served


@contextmanager
def serving(launched: tuple[Role, str]) -> Iterator[Api]:
    """The API ``launch`` started, once it answers; stopped after."""
    role, url = launched
    try:
        wait_until(lambda: _answers(url) or role.proc.poll() is not None, 60, f"the API on {url}")
        assert role.proc.poll() is None, f"es-sched api exited:\n{role.text()}"
        with httpx.Client(base_url=url, timeout=60) as client:
            yield Api(role, url, client)
    finally:
        role.stop()
