"""Ports and Prometheus endpoints: ``free_port`` for a server a test starts, ``scrape`` to read
``/metrics`` and ``metric`` to sum the samples of one metric."""

from __future__ import annotations

import re
import socket
import urllib.request


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        return str(resp.read().decode())


def metric(text: str, name: str, **labels: str) -> float | None:
    """The sum of every sample of ``name`` whose labels include ``labels``; None if none."""
    total, found = 0.0, False
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        series, value = line.rsplit(" ", 1)
        base, _, rest = series.partition("{")
        have = dict(re.findall(r'(\w+)="([^"]*)"', rest))
        if base == name and all(have.get(k) == v for k, v in labels.items()):
            total, found = total + float(value), True
    return total if found else None
