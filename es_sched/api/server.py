"""The ``api`` role: uvicorn serving the application until the role's stop event is set.

uvicorn installs signal handlers only on the main thread; in ``es-sched run`` the role runs in
a thread, so the stop event (set by ``run``'s own handlers) asks the server to exit, which
finishes requests in flight and runs the application's shutdown (closing its clients).

``serve_workers`` runs N processes on one port instead (``es-sched api --workers N``): one
Python process uses one core for the routes' Python, so a 2-core machine needs two. uvicorn's
supervisor owns the signals then (the CLI's main thread), and builds the application in each
worker from an import string (``bootstrap.api_app``), so everything a worker needs comes
from the environment: the listening host, and one JWT key for all of them when none is
configured (a token one worker issued must pass in another). Caches (keys, the reflected
offsets, the log's ends) are per process; the gateway and auth allow several API processes.

The shared socket is bound here, not by uvicorn: uvicorn 0.54's ``Config.bind_socket`` leaves
the socket's protocol at 0, accepted connections inherit it, and asyncio turns ``TCP_NODELAY``
on only for a socket that says ``IPPROTO_TCP``. Nagle's algorithm then holds every keep-alive
response's last segment for the client's delayed ACK, a delay per request that only several
API processes (uvicorn's shared socket) pay (ADR 35; upstream: Kludex/uvicorn#3149).

On Linux each worker process listens on a socket of its own, all bound to the port with
``SO_REUSEPORT``, so the kernel spreads new connections over the processes by a hash of the
connection's addresses. On one shared socket, whichever process is in ``accept`` first takes
them: keep-alive clients split unevenly between the processes, and the busier process sets the
tail (ADR 39). The supervisor binds the port first
(``PortClaim``: bound, never listening, so it takes no connection; it fails at once when the
port is taken) and uvicorn hands it to each child, where unpickling it opens that child's own
listener (``own_listener``). BSD and macOS do not balance ``SO_REUSEPORT`` listeners (the last
bound gets every connection): elsewhere the shared socket stays.

Both paths run uvicorn on httptools (its C HTTP parser) and uvloop, named here rather than left
to uvicorn's "auto", which falls back to h11 and asyncio without a word when they are missing
(ADR 35: the API's CPU per HTTP task -19%). uvloop turns ``TCP_NODELAY`` on for every TCP
connection itself (checked on an accepted connection), so the Nagle fix above still holds.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import sys
import threading
from typing import Any

import uvicorn
from fastapi import FastAPI
from uvicorn.supervisors import Multiprocess

from es_sched.errors import InfrastructureError
from es_sched.settings import ApiSettings

log = logging.getLogger(__name__)
SERVER: dict[str, Any] = {"http": "httptools", "loop": "uvloop"}  # see the module's docstring


class ApiServer:
    def __init__(self, settings: ApiSettings, app: FastAPI, port: int | None = None) -> None:
        self.config = uvicorn.Config(
            app,
            host=settings.host,
            port=settings.port if port is None else port,
            log_level="warning",
            access_log=False,
            timeout_graceful_shutdown=10,
            **SERVER,
        )
        self.server = uvicorn.Server(self.config)

    def run(self, stop: threading.Event) -> None:
        def watch() -> None:
            stop.wait()
            self.server.should_exit = True

        threading.Thread(target=watch, name="api-stop", daemon=True).start()
        log.info("API on http://%s:%d (console: /ui/)", self.config.host, self.config.port)
        self.server.run()
        stop.set()


FACTORY = "es_sched.bootstrap:api_app"


def serve_workers(settings: ApiSettings, workers: int, port: int | None = None) -> None:
    """Serve with ``workers`` processes until SIGINT or SIGTERM (call on the main thread)."""
    os.environ["ES_SCHED_API_HOST"] = settings.host
    if not settings.jwt_secret:
        os.environ["ES_SCHED_API_JWT_SECRET"] = secrets.token_urlsafe(48)
    port = settings.port if port is None else port
    log.info(
        "API on http://%s:%d with %d worker processes (console: /ui/)", settings.host, port, workers
    )
    config = uvicorn.Config(
        FACTORY,
        factory=True,
        workers=workers,
        host=settings.host,
        port=port,
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=10,
        **SERVER,
    )
    claim = PortClaim.of(settings.host, port) if BALANCED else listening_socket(settings.host, port)
    Multiprocess(config, sockets=[claim]).run()


# Linux balances SO_REUSEPORT TCP listeners by a hash of each connection (since 3.9).
BALANCED = sys.platform == "linux"


def listening_socket(host: str, port: int, reuse_port: bool = False) -> socket.socket:
    """A socket bound to ``host:port``, with its protocol said (``IPPROTO_TCP``) so that
    asyncio sets ``TCP_NODELAY`` on each connection (see the module's docstring)."""
    sock = socket.socket(_family(host), socket.SOCK_STREAM, socket.IPPROTO_TCP)
    _bind(sock, host, port, reuse_port)
    sock.set_inheritable(True)
    return sock


def own_listener(host: str, port: int) -> socket.socket:
    """One worker process's listener on the port its supervisor claimed (``PortClaim``)."""
    return listening_socket(host, port, reuse_port=True)


class PortClaim(socket.socket):
    """The port, bound with ``SO_REUSEPORT`` in the supervisor and never listening; pickled
    into a worker process (how uvicorn passes its sockets) it becomes ``own_listener``."""

    @classmethod
    def of(cls, host: str, port: int) -> PortClaim:
        """Claim ``port`` (0: a free one). Probed with a plain bind first: another process's
        ``SO_REUSEPORT`` listener (a second ``es-sched api`` of the same user) would otherwise
        let this one join its port and share its connections instead of failing."""
        with listening_socket(host, port) as probe:
            port = probe.getsockname()[1]
        sock = cls(_family(host), socket.SOCK_STREAM, socket.IPPROTO_TCP)
        _bind(sock, host, port, reuse_port=True)
        return sock

    def __reduce__(self) -> tuple[Any, tuple[str, int]]:
        host, port = self.getsockname()[:2]
        return own_listener, (host, port)


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def _bind(sock: socket.socket, host: str, port: int, reuse_port: bool) -> None:
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise InfrastructureError(f"cannot listen on {host}:{port}: {exc}") from exc
