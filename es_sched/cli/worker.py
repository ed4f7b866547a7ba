"""``es-sched worker``: serve a pool's assignments from the command line.

``--noop`` registers, for every type in ``--types``, a handler that completes at once with its
input echoed as output (tests and benchmarks); ``--noop-s`` makes it hold each task that long
first, so that a worker holds leases when it is killed (``bench/recovery.py``). ``--media``
serves the built-in media handlers (``es_sched.workers.media``: media.probe, transcode,
thumbnail, package, write_asset, callback), which need ffmpeg and
ES_SCHED_MEDIA_CALLBACK_SECRET. Other handlers are Python: build an ``es_sched.workers.Worker``
and call ``run``. SIGINT/SIGTERM start the graceful shutdown: no new tasks, ``--grace-s`` for
running ones, the rest handed back, then a status tombstone.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
from collections.abc import Callable
from dataclasses import replace
from types import FrameType
from typing import Any

import click

from es_sched import bootstrap
from es_sched.cli import stacks
from es_sched.kafka import roster
from es_sched.kafka.connection import worker_principal
from es_sched.metrics import serve
from es_sched.settings import load_settings
from es_sched.workers import TaskContext, Worker
from es_sched.workers.capacity import Capacity, discover
from es_sched.workers.media import register_media


def _types(value: str) -> list[str]:
    return [t.strip() for t in value.split(",") if t.strip()]


def noop_worker(worker: Worker, types: list[str], hold_s: float = 0.0) -> Worker:
    def echo(_ctx: TaskContext, task_input: dict[str, Any]) -> dict[str, Any]:
        return dict(task_input)

    async def held(_ctx: TaskContext, task_input: dict[str, Any]) -> dict[str, Any]:
        await asyncio.sleep(hold_s)
        return dict(task_input)

    for task_type in types:
        worker.task(task_type)(held if hold_s > 0 else echo)
    return worker


def _capacity(
    cpu: float | None, memory_mb: int | None, custom: dict[str, float] | None = None
) -> Capacity | None:
    """What the worker declares: the machine's, with --cpu / --memory-mb replacing parts of it
    (a worker sharing its machine, or no-op workers whose tasks use nothing) and --custom
    adding units only its operator knows of."""
    if cpu is None and memory_mb is None and not custom:
        return None
    found = discover()
    return replace(
        found, cpu=cpu or found.cpu, memory_mb=memory_mb or found.memory_mb, custom=custom or {}
    )


def _custom(
    _ctx: click.Context, _param: click.Parameter, values: tuple[str, ...]
) -> dict[str, float]:
    """``--custom gpu_slot=2`` (repeatable) -> {"gpu_slot": 2.0}."""
    out: dict[str, float] = {}
    for item in values:
        name, sep, amount = item.partition("=")
        try:
            value = float(amount)
        except ValueError:
            value = -1.0
        if not sep or not name.strip() or not value >= 0 or value == float("inf"):
            raise click.BadParameter(f"{item!r}: expected NAME=AMOUNT with AMOUNT >= 0")
        out[name.strip()] = value
    return out


@click.command("worker")
@click.option("--pool", default="default", show_default=True, help="Pool whose tasks to run.")
@click.option("--types", default="", help="Comma-separated task types (required with --noop).")
@click.option("--concurrency", type=click.IntRange(min=1), default=4, show_default=True)
@click.option("--version", "worker_version", default="0.0.0", show_default=True)
@click.option("--worker-id", default=None, help="Default: <host>-<pid>-<random>.")
@click.option("--noop", is_flag=True, help="Complete every task at once, echoing its input.")
@click.option(
    "--noop-s",
    type=click.FloatRange(min=0),
    default=0.0,
    show_default=True,
    help="With --noop: hold each task this long before completing it.",
)
@click.option("--media", is_flag=True, help="Serve the built-in media.* handlers (ffmpeg).")
@click.option(
    "--heartbeat-s",
    type=click.FloatRange(min=0.05),
    default=None,
    help="Default: ES_SCHED_DISPATCH_HEARTBEAT_S (what the dispatcher expects).",
)
@click.option(
    "--cpu", type=click.FloatRange(min=0.01), help="Declare this many CPUs (default: discovered)."
)
@click.option(
    "--memory-mb",
    type=click.IntRange(min=1),
    help="Declare this much memory (default: discovered).",
)
@click.option(
    "--custom",
    multiple=True,
    callback=_custom,
    metavar="NAME=AMOUNT",
    help="Declare custom units tasks ask for in resources.custom (repeatable).",
)
@click.option("--grace-s", type=click.FloatRange(min=0), default=30.0, show_default=True)
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    default=0,
    show_default=True,
    help="Serve Prometheus /metrics here (0: none).",
)
@click.option("--log-level", default="INFO", show_default=True)
def worker(
    pool: str,
    types: str,
    concurrency: int,
    worker_version: str,
    worker_id: str | None,
    noop: bool,
    noop_s: float,
    media: bool,
    heartbeat_s: float | None,
    cpu: float | None,
    memory_mb: int | None,
    custom: dict[str, float],
    grace_s: float,
    metrics_port: int,
    log_level: str,
) -> None:
    """Run a worker until SIGINT or SIGTERM."""
    if noop == media:
        raise click.UsageError(
            "choose --noop (with --types) or --media; "
            "serve other handlers with es_sched.workers.Worker(...).run()"
        )
    if noop and not _types(types):
        raise click.UsageError("--noop needs --types T1,T2")
    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    settings = load_settings()
    if not settings.kafka.principal:  # the pool's principal for all its clients (ADR 72)
        settings = bootstrap.as_principal(settings, worker_principal(pool))
    w = Worker(
        pool=pool,
        version=worker_version,
        worker_id=worker_id,
        concurrency=concurrency,
        settings=settings,
        heartbeat_s=heartbeat_s,
        grace_s=grace_s,
        capacity=_capacity(cpu, memory_mb, custom),
    )
    if media:
        register_media(w, settings)  # ConfigError (ffmpeg, the callback secret) stops us here
    else:
        noop_worker(w, _types(types), noop_s)
    stop = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        logging.getLogger("es_sched").info("signal %d: stopping", signum)
        stop.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    stacks.install()
    # Its liveness record (ADR 61), and a refusal beside a live process of another deployment
    # (ADR 63): the worker id is its own, so there is no instance to claim.
    keys = [("worker", w.worker_id)]
    reader = roster.claim(settings, keys, replace=False)
    beacon = roster.Beacon(
        settings, keys, w.metrics, reader, stop_lost(stop), version=worker_version
    ).start()
    server = serve(w.metrics, metrics_port)
    try:
        w.run(stop)
    finally:
        beacon.close()
        if server is not None:
            server.shutdown()


def stop_lost(stop: threading.Event) -> Callable[[str], None]:
    def lost(reason: str) -> None:
        logging.getLogger("es_sched").error("%s: stopping", reason)
        stop.set()

    return lost
