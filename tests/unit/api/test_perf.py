"""The API's speed parts (issue 14 item 6) without a database: the reflected offsets are
reused for ``reflects_cache_s`` and read again after it, the API's read-model pool is sized
by its settings, and ``--workers N`` hands each uvicorn worker what it cannot get from the
CLI's memory (the host, and one JWT key for all when none is configured) and a socket whose
connections get TCP_NODELAY; on Linux, a listener of its own on the claimed port, so the
kernel spreads connections over the processes."""

from __future__ import annotations

import asyncio
import os
import pickle
import select
import socket
from dataclasses import replace
from multiprocessing.reduction import ForkingPickler
from typing import Any

import pytest
import uvicorn

from es_sched import bootstrap
from es_sched.api import reflected, server
from es_sched.api.services import Lazy, Services
from es_sched.errors import InfrastructureError
from es_sched.projections.postgres import queries
from es_sched.settings import ApiSettings, load_settings


def _svc(cache_s: float) -> Services:
    settings = replace(load_settings(), api=ApiSettings(auth="off", reflects_cache_s=cache_s))

    class Pg:
        engine = None

    return Services(settings, Lazy(Pg), Lazy(object), Lazy(object))  # type: ignore[arg-type]


def test_the_reflected_offsets_are_read_once_per_cache_period(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reads: list[int] = []

    def read(_engine: Any) -> dict[str, dict[int, int]]:
        reads.append(1)
        return {"events": {0: len(reads)}}

    monkeypatch.setattr(queries, "reflected", read)
    cached = _svc(10)
    assert [reflected.reflected(cached, "events") for _ in range(3)] == [{0: 1}] * 3
    assert reflected.reflected(cached, "other") == {}
    assert len(reads) == 1
    fresh = _svc(0)  # 0 s: every request reads the checkpoints again
    assert [reflected.reflected(fresh, "events") for _ in range(2)] == [{0: 2}, {0: 3}]


def test_the_api_pool_is_sized_by_its_settings() -> None:
    api = ApiSettings(auth="off", pg_pool_size=23, pg_max_overflow=2)
    store = bootstrap.api_pg_store(replace(load_settings(), api=api))
    try:
        assert (store.engine.pool.size(), store.engine.pool._max_overflow) == (23, 2)  # type: ignore[attr-defined]
    finally:
        store.engine.dispose()


def test_workers_share_one_jwt_key_and_the_host(monkeypatch: pytest.MonkeyPatch) -> None:
    ran: dict[str, Any] = {}

    class Supervisor:
        def __init__(self, config: uvicorn.Config, sockets: list[socket.socket]) -> None:
            c = config
            ran.update(app=c.app, factory=c.factory, workers=c.workers, port=c.port)
            ran["proto"] = sockets[0].proto
            sockets[0].close()

        def run(self) -> None:
            ran["ran"] = True

    monkeypatch.setattr(server, "Multiprocess", Supervisor)
    monkeypatch.delenv("ES_SCHED_API_JWT_SECRET", raising=False)
    monkeypatch.setenv("ES_SCHED_API_HOST", "127.0.0.1")
    server.serve_workers(ApiSettings(host="localhost", auth="off"), 2, port=0)
    assert (ran["app"], ran["factory"], ran["workers"], ran["port"], ran["ran"]) == (
        "es_sched.bootstrap:api_app",
        True,
        2,
        0,
        True,
    )
    assert ran["proto"] == socket.IPPROTO_TCP
    assert os.environ["ES_SCHED_API_HOST"] == "localhost"
    assert len(os.environ["ES_SCHED_API_JWT_SECRET"]) >= 32  # one key for every worker
    configured = "x" * 40
    monkeypatch.setenv("ES_SCHED_API_JWT_SECRET", configured)
    server.serve_workers(ApiSettings(auth="off", jwt_secret=configured), 2, port=0)
    assert os.environ["ES_SCHED_API_JWT_SECRET"] == configured


def test_the_workers_socket_gives_connections_tcp_nodelay() -> None:
    """What the shared socket is for: asyncio sets TCP_NODELAY on a connection it accepts only
    when the listener says IPPROTO_TCP (uvicorn's own ``bind_socket`` says 0: 44 ms per
    keep-alive request, server.py's docstring). Read on the accepted socket itself."""
    listener = server.listening_socket("127.0.0.1", 0)
    nodelay: list[int] = []

    class Probe(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            sock = transport.get_extra_info("socket")
            nodelay.append(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            transport.close()

    async def accept_one() -> None:
        srv = await asyncio.get_running_loop().create_server(Probe, sock=listener)
        async with srv:
            port = listener.getsockname()[1]
            _reader, writer = await asyncio.open_connection("127.0.0.1", port)
            while not nodelay:
                await asyncio.sleep(0.01)
            writer.close()

    asyncio.run(asyncio.wait_for(accept_one(), 10))
    assert nodelay == [1]


def test_a_port_in_use_is_an_infrastructure_error() -> None:
    taken = server.listening_socket("127.0.0.1", 0)
    taken.listen()
    try:
        with pytest.raises(InfrastructureError, match=r"cannot listen on 127\.0\.0\.1"):
            server.listening_socket("127.0.0.1", taken.getsockname()[1])
    finally:
        taken.close()


@pytest.mark.skipif(not server.BALANCED, reason="SO_REUSEPORT balances TCP only on Linux")
def test_each_worker_unpickles_a_listener_of_its_own_and_connections_spread_over_them() -> None:
    """What uvicorn's spawn does with the supervisor's sockets (multiprocessing's pickler),
    twice: each worker gets its own listener on the claimed port. The claim itself never
    listens (a connection with no worker is refused), and 64 connections reach both."""
    claim = server.PortClaim.of("127.0.0.1", 0)
    port = claim.getsockname()[1]
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    workers = [pickle.loads(ForkingPickler.dumps(claim)) for _ in range(2)]  # noqa: S301 (ours)
    clients: list[socket.socket] = []
    try:
        for w in workers:
            assert w.getsockname()[1] == port and w.proto == socket.IPPROTO_TCP
            assert w.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT) == 1
            w.listen(128)
        clients = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(64)]
        accepted = [0, 0]
        while sum(accepted) < len(clients):
            ready, _, _ = select.select(workers, [], [], 5)
            assert ready, f"only {sum(accepted)} of {len(clients)} connections accepted"
            for w in ready:
                w.accept()[0].close()
                accepted[workers.index(w)] += 1
        assert all(accepted), accepted  # one listener for all would be the shared socket's way
    finally:
        for sock in [claim, *workers, *clients]:
            sock.close()


@pytest.mark.skipif(not server.BALANCED, reason="SO_REUSEPORT balances TCP only on Linux")
def test_a_port_another_api_shares_with_reuse_port_is_not_joined() -> None:
    other = server.own_listener("127.0.0.1", 0)  # another es-sched api's worker, same user
    other.listen()
    try:
        with pytest.raises(InfrastructureError, match=r"cannot listen on 127\.0\.0\.1"):
            server.PortClaim.of("127.0.0.1", other.getsockname()[1])
    finally:
        other.close()
