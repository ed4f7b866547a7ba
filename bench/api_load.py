"""The API benchmark's load generator: C concurrent clients for S seconds over a list of paths.

Runs in its own process (``python bench/api_load.py SPEC.json``, prints one JSON document), so
the server's event loop and this one do not share an interpreter. Each client is a coroutine
on one ``httpx.AsyncClient`` (a connection each: the pool holds ``clients`` connections) that
sends GET requests back to back, taking the next path of the list in turn, for ``warmup``
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

import httpx

CURVE = (50, 75, 90, 95, 99)  # the percentiles kept for the plot


def percentile(values: list[float], q: float) -> float:
    """The nearest-rank percentile (``q`` in 0..100) of ``values``; 0 when empty."""
    if not values:
        return 0.0
    ranked = sorted(values)
    rank = max(1, round(q / 100 * len(ranked) + 0.5 - 1e-9))
    return ranked[min(rank, len(ranked)) - 1]


async def load(
    url: str,
    paths: list[str],
    clients: int = 50,
    seconds: float = 10.0,
    warmup: float = 1.0,
    timeout: float = 30.0,
) -> dict[str, Any]:
    turn = itertools.cycle(paths)
    statuses: Counter[str] = Counter()
    latencies: list[float] = []
    sent = 0
    loop = asyncio.get_running_loop()
    begin = loop.time() + warmup
    end = begin + seconds
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)

    async def client(http: httpx.AsyncClient) -> None:
        nonlocal sent
        while (now := loop.time()) < end:
            recorded = now >= begin
            sent += recorded
            started = time.perf_counter()
            try:
                response = await http.get(next(turn))
                outcome = str(response.status_code)
            except httpx.HTTPError as exc:
                outcome = type(exc).__name__
            took = (time.perf_counter() - started) * 1000
            if recorded:
                statuses[outcome] += 1
                if outcome.startswith("2"):
                    latencies.append(took)

    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=timeout) as http:
        await asyncio.gather(*(client(http) for _ in range(clients)))
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
    result = asyncio.run(load(
        spec["url"], spec["paths"], spec.get("clients", 50), spec.get("seconds", 10.0),
        spec.get("warmup", 1.0), spec.get("timeout", 30.0),
    ))  # fmt: skip
    print(json.dumps(result))


if __name__ == "__main__":
    main()
