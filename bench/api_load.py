"""The API benchmark's load generator: C concurrent clients for S seconds over a list of paths.

Runs in its own process (``python bench/api_load.py SPEC.json``, prints one JSON document), so
the server's event loop and this one do not share an interpreter. Each client is a coroutine
with its own keep-alive HTTP/1.1 connection (``_Connection``: asyncio streams, GET only) that
sends requests back to back, taking the next path of the list in turn, for ``warmup``
seconds unrecorded and then ``seconds`` recorded. Every request sent in the recorded window is
counted under its HTTP status or, when no answer came, its exception's class name; the
latency kept is from sending to the whole body read.

Spec: ``{"url", "paths", "clients", "seconds", "warmup", "timeout"}``. Result: ``requests``,
``answered`` (equals ``requests``: every request got a status or an error),
``requests_per_second``, ``p50_ms``, ``p99_ms``, ``max_ms`` (over the 2xx answers),
``percentiles_ms`` (50, 75, 90, 95, 99), ``load_cpu_share`` (this process's CPU seconds per
second of load), ``statuses`` (status or error -> count),
``seconds``, ``clients``.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

CURVE = (50, 75, 90, 95, 99)  # the percentiles kept for the plot


def percentile(values: list[float], q: float) -> float:
    """The nearest-rank percentile (``q`` in 0..100) of ``values``; 0 when empty."""
    if not values:
        return 0.0
    ranked = sorted(values)
    rank = max(1, round(q / 100 * len(ranked) + 0.5 - 1e-9))
    return ranked[min(rank, len(ranked)) - 1]


class _Connection:
    """One keep-alive HTTP/1.1 connection with just enough of the protocol for GET: httpx
    spent a whole core at ~200 requests/s on this machine, which then set the pace."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def get(self, path: str) -> int:
        if self.writer is None or self.reader is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        reader, writer = self.reader, self.writer
        writer.write(f"GET {path} HTTP/1.1\r\nHost: {self.host}\r\n\r\n".encode())
        await writer.drain()
        head = (await reader.readuntil(b"\r\n\r\n")).split(b"\r\n")
        status = int(head[0].split()[1])
        fields = dict(line.split(b":", 1) for line in head[1:] if b":" in line)
        headers = {k.strip().lower(): v.strip().lower() for k, v in fields.items()}
        if b"content-length" in headers:
            await reader.readexactly(int(headers[b"content-length"]))
        elif headers.get(b"transfer-encoding") == b"chunked":
            while size := int((await reader.readline()).split(b";")[0], 16):
                await reader.readexactly(size + 2)  # the chunk and its CRLF
            await reader.readexactly(2)  # the CRLF after the last (empty) chunk
        if headers.get(b"connection") == b"close":
            self.close()
        return status

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


async def load(
    url: str,
    paths: list[str],
    clients: int = 50,
    seconds: float = 10.0,
    warmup: float = 1.0,
    timeout: float = 30.0,
) -> dict[str, Any]:
    where = urlsplit(url)
    host, port = where.hostname or "127.0.0.1", where.port or 80
    turn = itertools.cycle(paths)
    statuses: Counter[str] = Counter()
    latencies: list[float] = []
    sent = 0
    loop = asyncio.get_running_loop()
    begin = loop.time() + warmup
    end = begin + seconds

    async def client() -> None:
        nonlocal sent
        connection = _Connection(host, port)
        while (now := loop.time()) < end:
            recorded = now >= begin
            sent += recorded
            started = time.perf_counter()
            try:
                outcome = str(await asyncio.wait_for(connection.get(next(turn)), timeout))
            except (OSError, EOFError, ValueError, IndexError, asyncio.LimitOverrunError) as exc:
                outcome = type(exc).__name__  # no answer (or not HTTP): start a new connection
                connection.close()
            took = (time.perf_counter() - started) * 1000
            if recorded:
                statuses[outcome] += 1
                if outcome.startswith("2"):
                    latencies.append(took)
        connection.close()

    await asyncio.gather(*(client() for _ in range(clients)))
    answered = sum(statuses.values())
    return {
        # This process's CPU over the whole load (warm-up included): near 1 per elapsed
        # second means the load generator, not the server, set the pace.
        "load_cpu_share": round(time.process_time() / (loop.time() - begin + warmup), 2),
        "clients": clients,
        "seconds": seconds,
        "requests": sent,
        "answered": answered,
        "requests_per_second": round(answered / seconds, 1),
        "p50_ms": round(percentile(latencies, 50), 2),
        "p99_ms": round(percentile(latencies, 99), 2),
        "max_ms": round(max(latencies, default=0.0), 2),
        "percentiles_ms": {str(q): round(percentile(latencies, q), 2) for q in CURVE},
        "statuses": dict(sorted(statuses.items())),
    }


def main() -> None:
    spec = json.loads(Path(sys.argv[1]).read_text())
    result = asyncio.run(
        load(
            spec["url"],
            spec["paths"],
            spec.get("clients", 50),
            spec.get("seconds", 10.0),
            spec.get("warmup", 1.0),
            spec.get("timeout", 30.0),
        )
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
