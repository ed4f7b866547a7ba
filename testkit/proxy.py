"""A TCP forwarder a test can take down and bring back: a store outage for the processes that
reach the store through it, without stopping the store other tests share.

``Proxy(target_host, target_port)`` listens on a free port of 127.0.0.1 and forwards each
connection to the target. ``down()`` closes the listener and every open connection (a client
gets connection refused or reset, as from a stopped server); ``up()`` listens on the same port
again.
"""

from __future__ import annotations

import contextlib
import socket
import threading

from testkit.net import free_port


class Proxy:
    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.port = free_port()
        self.lock = threading.Lock()
        self.conns: list[socket.socket] = []
        self.listener: socket.socket | None = None
        self.up()

    def up(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self.listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def down(self) -> None:
        with self.lock:
            listener, self.listener = self.listener, None
            conns, self.conns = self.conns, []
        if listener is not None:
            listener.close()
        for conn in conns:
            with contextlib.suppress(OSError):  # already closed by its peer
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # closed by down()
            try:
                server = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            server.settimeout(None)
            with self.lock:
                if self.listener is not listener:
                    client.close()
                    server.close()
                    return
                self.conns += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass  # one side went away: so does the other
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
