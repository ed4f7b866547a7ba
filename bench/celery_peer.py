"""The Celery peer of bench/side_by_side.py: examples/media_pipeline.json's 1080p branch as a
Celery canvas on Redis, no-op task bodies, prefork workers (docs/adr/0029).

The canvas is built from the JSON, not written by hand: ``dag_stages`` walks the definition's
top-level tasks, takes the SWITCH's "1080" case, turns a FORK_JOIN into one parallel stage and
skips the JOIN (Celery's chord is the join) and the failure-only CALLBACK task. ``canvas`` makes
a chain of the stages where a parallel stage and the stage after it become a chord:
chain(probe, chord(group(4 transcodes), thumbnail), package, write_asset, callback).

Measured by two signals, on one clock (one machine): ``before_task_publish`` stamps the send
time into the message headers (in the client for the first task, in a worker for the others);
``task_prerun`` pushes ``start - sent`` to a Redis list. The last task of a DAG pushes its own
end time with the DAG's id. One RPUSH per task is the measuring cost Celery pays; es-sched is
measured from its topics after the fact.

Celery's settings are its defaults (``BENCH_CELERY_MODE=default``) or ``acks_late``:
``task_acks_late=True`` and ``worker_prefetch_multiplier=1``, the durable-ish setting. Either
way Redis runs without persistence (``--save "" --appendonly no``), so Celery keeps nothing
durable across a Redis restart.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import redis
from celery import Celery, chain, chord, group, signals
from celery import __version__ as celery_version
from celery.canvas import Signature

ROOT = Path(__file__).resolve().parents[1]
REDIS = Path("/usr/bin/redis-server")
INSTALL = ["apt-get", "install", "-y", "-q", "--no-install-recommends", "redis-server"]
MODES = {
    "default": {},
    "acks_late": {"task_acks_late": True, "worker_prefetch_multiplier": 1},
}
DISPATCH, DONE = "bench:dispatch", "bench:done"
SENT = "bench_sent"

Stage = list[tuple[str, str]]  # (taskReferenceName, name); more than one: run in parallel


def dag_stages(definition: dict[str, Any], case: str = "1080") -> list[Stage]:
    """The worker tasks of ``definition`` in order, a fork's branches as one parallel stage."""
    stages: list[Stage] = []

    def walk(tasks: list[dict[str, Any]]) -> None:
        for t in tasks:
            kind = t.get("type", "SIMPLE")
            if kind == "SIMPLE":
                stages.append([(t["taskReferenceName"], t["name"])])
            elif kind == "SWITCH":
                walk(t["decisionCases"][case])
            elif kind == "FORK_JOIN":
                branch: Stage = []
                for fork in t["forkTasks"]:
                    if len(fork) != 1 or fork[0].get("type", "SIMPLE") != "SIMPLE":
                        raise ValueError("only forks of single SIMPLE tasks are mirrored")
                    branch.append((fork[0]["taskReferenceName"], fork[0]["name"]))
                stages.append(branch)
            elif kind in ("JOIN", "CALLBACK"):
                continue  # the chord joins; CALLBACK runs only when the workflow fails
            else:
                raise ValueError(f"task type {kind} has no Celery mirror here")

    walk(definition["tasks"])
    return stages


def media_stages() -> list[Stage]:
    return dag_stages(json.loads((ROOT / "examples" / "media_pipeline.json").read_text()))


app = Celery("bench_peer")
app.conf.update(
    broker_url=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6399/0"),
    result_backend=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6399/0"),
    **MODES[os.environ.get("BENCH_CELERY_MODE", "default")],
)
_client: list[redis.Redis] = []  # one per (forked) process, made on first use


def _redis() -> redis.Redis:
    if not _client:
        _client.append(redis.Redis.from_url(app.conf.broker_url))
    return _client[0]


def _noop(dag_id: str, ref: str, last: bool) -> None:
    if last:
        _redis().rpush(DONE, f"{dag_id} {time.time()}")


TASKS = {
    name: app.task(name=name)(_noop) for name in sorted({n for s in media_stages() for _, n in s})
}


def canvas(stages: list[Stage], dag_id: str) -> Signature:
    """chain of the stages; a parallel stage and the next stage become chord(group, next)."""
    last_ref = stages[-1][-1][0]

    def sig(ref: str, name: str) -> Signature:
        return TASKS[name].si(dag_id, ref, ref == last_ref)

    parts: list[Signature] = []
    i = 0
    while i < len(stages):
        stage = stages[i]
        if len(stage) > 1:
            if i + 1 >= len(stages) or len(stages[i + 1]) != 1:
                raise ValueError("a parallel stage must be followed by one task (its chord body)")
            parts.append(chord(group(sig(*t) for t in stage), sig(*stages[i + 1][0])))
            i += 2
        else:
            parts.append(sig(*stage[0]))
            i += 1
    return chain(*parts)


def _stamp(headers: dict[str, Any] | None = None, **_: Any) -> None:
    if headers is not None:
        headers[SENT] = time.time()


def _started(task: Any = None, **_: Any) -> None:
    sent = getattr(task.request, SENT, None) if task is not None else None
    if sent is not None:
        _redis().rpush(DISPATCH, f"{(time.time() - float(sent)) * 1000:.3f}")


signals.before_task_publish.connect(_stamp)
signals.task_prerun.connect(_started)


# -- the bench side: a private Redis and one worker process ---------------------------------
def redis_server() -> Path:
    """Debian's redis-server, installed with apt-get as root when missing."""
    if REDIS.exists():
        return REDIS
    hint = f"run `apt-get update && {' '.join(INSTALL)}` as root"
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise SystemExit(f"{REDIS} is missing; {hint}")
    for cmd in (["apt-get", "update", "-q"], INSTALL):
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    if not REDIS.exists():
        raise SystemExit(f"{REDIS} is still missing after apt-get; {hint}")
    return REDIS


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RedisServer:
    """Debian's redis-server on its own port in a temp dir, persistence off, for one bench run
    (emptied with FLUSHALL between systems)."""

    def __init__(self, logs: Path) -> None:
        self.dir = tempfile.TemporaryDirectory(prefix="bench-redis-")
        port = free_port()
        self.url = f"redis://127.0.0.1:{port}/0"
        self.proc = subprocess.Popen(
            [
                str(redis_server()),
                "--port",
                str(port),
                "--bind",
                "127.0.0.1",
                "--dir",
                self.dir.name,
                "--save",
                "",
                "--appendonly",
                "no",
                "--daemonize",
                "no",
            ],
            stdout=(logs / "side-redis.log").open("w"),
            stderr=subprocess.STDOUT,
        )
        self.r = redis.Redis.from_url(self.url)
        deadline = time.monotonic() + 30
        while True:
            try:
                if self.r.ping():
                    break
            except redis.ConnectionError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise
                time.sleep(0.05)
        app.conf.update(broker_url=self.url, result_backend=self.url)

    def versions(self) -> dict[str, str]:
        return {
            "redis_server": str(self.r.info("server").get("redis_version")),
            "celery": celery_version,
            "redis_py": redis.__version__,
        }

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)
        self.dir.cleanup()


class CeleryPeer:
    """A prefork worker in ``mode`` on an emptied Redis; submits DAGs and reads their figures."""

    def __init__(
        self, mode: str, server: RedisServer, logs: Path, concurrency: int | None = None
    ) -> None:
        self.mode, self.server, self.logs, self.concurrency = mode, server, logs, concurrency
        self.stages = media_stages()
        self.r = server.r
        self.proc: subprocess.Popen[bytes] | None = None
        self.results: list[Any] = []  # the client's pending results, let go in stop()

    def start(self) -> None:
        self.r.flushall()
        env = {
            **os.environ,
            "BENCH_REDIS_URL": self.server.url,
            "BENCH_CELERY_MODE": self.mode,
            "PYTHONPATH": f"{ROOT / 'bench'}{os.pathsep}{ROOT}",
        }
        cmd = [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "celery_peer",
            "worker",
            "-P",
            "prefork",
            "--loglevel",
            "WARNING",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
        ]
        if self.concurrency:
            cmd += ["--concurrency", str(self.concurrency)]
        log = self.logs / f"side-celery-{self.mode}.log"
        self.proc = subprocess.Popen(
            cmd, env=env, cwd=ROOT / "bench", stdout=log.open("w"), stderr=subprocess.STDOUT
        )
        # Ready when a DAG goes through: the worker consumes, chords join, the last task reports.
        self.submit("warm-up")
        deadline = time.monotonic() + 120
        while not self.r.llen(DONE):
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError(f"celery worker did not complete a DAG; see {log}")
            time.sleep(0.1)
        self.r.delete(DONE, DISPATCH)

    def submit(self, dag_id: str) -> None:
        self.results.append(canvas(self.stages, dag_id).apply_async())

    def completions(self) -> dict[str, float]:
        rows = (_text(x).split() for x in self.r.lrange(DONE, 0, -1))
        return {k: float(t) for k, t in rows}

    def done_count(self) -> int:
        return int(self.r.llen(DONE))

    def take_dispatch_ms(self) -> list[float]:
        """The dispatch latencies recorded since the last call (and forget them)."""
        pipe = self.r.pipeline()
        pipe.lrange(DISPATCH, 0, -1)
        pipe.delete(DISPATCH)
        got, _ = pipe.execute()
        return [float(_text(x)) for x in got]

    def stop(self) -> None:
        # The client subscribed to each DAG's result channel (Celery's apply_async does):
        # unsubscribe while Redis is up, or the results' __del__ tries at interpreter exit.
        consumer = getattr(app.backend, "result_consumer", None)
        if consumer is not None and getattr(consumer, "_pubsub", None) is not None:
            consumer._pubsub.unsubscribe()
            consumer.subscribed_to.clear()
        self.results.clear()
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
