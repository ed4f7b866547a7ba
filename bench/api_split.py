"""How `es-sched api --workers 2` splits keep-alive connections between its processes.

Each trial starts a fresh ``es-sched api --workers 2`` (auth off, loopback), opens
``--clients`` connections at once (as the API benchmark's load generator does), sends one
request on each, reads the answers, and counts the established connections per server
process with ``ss -tnp``. A keep-alive connection stays with the process that accepted it
for its whole life, so the split is each process's share of the load (ADR 39).

``--root`` runs another checkout's code (a ``git worktree`` of an older commit, with this
checkout's ``.venv`` linked in): its ``es-sched`` and ``PYTHONPATH``.
Needs nothing but the virtualenv (no stack: the requests are for a static file).
Prints the splits, writes bench/results/current/api_split.json.
Rerun: `.venv/bin/python bench/api_split.py [--trials 8 --clients 50 --root PATH]`
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.progress import Progress

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from testkit.net import free_port  # noqa: E402
from testkit.wait import wait_until  # noqa: E402

REQUEST = b"GET /ui/static/console.css HTTP/1.1\r\nHost: bench\r\n\r\n"


def answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), 1) as s:
            s.sendall(REQUEST)
            return s.recv(64).startswith(b"HTTP/1.1 200")
    except OSError:
        return False


def exchange(port: int, n: int) -> list[socket.socket]:
    """``n`` connections opened at once, then one request sent on each and its answer read."""
    conns = [socket.create_connection(("127.0.0.1", port), 5) for _ in range(n)]
    for c in conns:
        c.sendall(REQUEST)
    for c in conns:
        c.recv(65536)
    return conns


def per_process(port: int) -> list[int]:
    """Established connections on ``port``, counted per server pid (ascending)."""
    query = ["ss", "-tnpH", "state", "established", f"( sport = :{port} )"]
    listed = subprocess.run(query, capture_output=True, text=True, check=True).stdout
    pids = re.findall(r"pid=(\d+)", listed)
    return sorted(pids.count(p) for p in set(pids))


def trial(root: Path, clients: int) -> list[int]:
    port = free_port()
    env = dict(os.environ, ES_SCHED_API_AUTH="off", PYTHONPATH=str(root))
    cmd = [
        str(root / ".venv" / "bin" / "es-sched"),
        "api",
        "--workers",
        "2",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--log-level",
        "WARNING",
    ]
    server = subprocess.Popen(
        cmd, env=env, cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    conns: list[socket.socket] = []
    try:
        wait_until(lambda: answers(port), 60, "the API answering")
        # Both processes serving: every worker answers its own probe connections in turn.
        wait_until(lambda: len(per_process_after_probes(port)) == 2, 60, "two API processes")
        conns = exchange(port, clients)
        return per_process(port)
    finally:
        for c in conns:
            c.close()
        server.terminate()
        server.wait(30)


def per_process_after_probes(port: int, probes: int = 16) -> list[int]:
    """Open ``probes`` connections, answered, and count them per process: two entries once
    both processes accept (the listeners of a process still starting take none)."""
    conns = exchange(port, probes)
    try:
        return per_process(port)
    finally:
        for c in conns:
            c.close()
        wait_until(lambda: not per_process(port), 10, "the probes' connections closed")


def main() -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--trials", type=int, default=8)
    p.add_argument("--clients", type=int, default=50)
    p.add_argument("--root", type=Path, default=ROOT)
    p.add_argument(
        "--out", type=Path, default=ROOT / "bench" / "results" / "current" / "api_split.json"
    )
    opts = p.parse_args()
    console = Console()
    splits: list[list[int]] = []
    with Progress(console=console) as progress:
        task = progress.add_task("trials", total=opts.trials)
        for _ in range(opts.trials):
            splits.append(trial(opts.root.resolve(), opts.clients))
            progress.advance(task)
    smaller = [s[0] if len(s) == 2 else 0 for s in splits]
    commit = subprocess.run(
        ["git", "-C", str(opts.root), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    result = {
        "benchmark": "api_split",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "code": commit,
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "clients": opts.clients,
        "splits": splits,
        "smaller_share_min": min(smaller),
        "smaller_share_median": statistics.median(smaller),
    }
    opts.out.parent.mkdir(parents=True, exist_ok=True)
    opts.out.write_text(json.dumps(result, indent=2) + "\n")
    console.print(
        f"{commit}: {opts.clients} connections over 2 processes, {opts.trials} trials: "
        f"{splits}; the smaller share: min {min(smaller)}, median "
        f"{statistics.median(smaller)}"
    )


if __name__ == "__main__":
    main()
