"""``es-sched run``: the long-running roles, one process each or all in one.

``--role decider|timers|retry|dispatcher|projector-pg|projector-search|analytics|api`` runs one
role (repeatable); without ``--role`` all of them but ``api`` (the HTTP API) run in threads of one
process (development).
``--metrics-port`` (or ``ES_SCHED_RUN_METRICS_PORT``) serves every role's metrics of this
process on one Prometheus endpoint. SIGINT/SIGTERM stop the roles cleanly: the current
transaction finishes, the consumer leaves its group. A role that has not returned
``STOP_GRACE_S`` after the signal (a client call stuck while the broker is unreachable) is left
behind and the process exits non-zero: a stop request is never ignored.

Before the roles start, the process claims the instance of its decider, timers and retry
relay on ``<prefix>.system`` and then renews a liveness record of each role every
``ES_SCHED_SYSTEM_LIVENESS_INTERVAL_S`` (ADR 61, ``es_sched.kafka.roster``): it refuses to
start when a live process holds one of those instances (the message names its host and pid)
or when a live process of another deployment uses the topic prefix (ADR 63). ``--replace``
takes a held instance over on purpose; the holder stops when it reads that. A restart after a
crash on this host takes over at once (the holder's pid is gone).

``--processes N`` (N > 1) runs the roles in N child processes instead, one ``es-sched run`` of
the same roles each, supervised by this one (``es_sched.cli.processes``, ADR 33): slot ``i``
has ``ES_SCHED_RUN_INSTANCE=<instance>-<i>`` (so its own transactional and static member ids)
and, with a metrics port P, serves its metrics on P+i. The HTTP API is not multiplied here:
``es-sched api --workers N`` shares one port among its workers.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from types import FrameType

import click

from es_sched import bootstrap
from es_sched.bootstrap import OPTIONAL_ROLES, ROLES, Role
from es_sched.cli import stacks
from es_sched.cli.processes import Supervisor, slot_instance
from es_sched.errors import EsSchedError
from es_sched.kafka import roster
from es_sched.metrics import Registry, serve
from es_sched.roster import CLAIMED_ROLES
from es_sched.settings import Settings, load_settings

STOP_GRACE_S = 30.0


@click.command("run")
@click.option(
    "--role",
    type=click.Choice(ROLES + OPTIONAL_ROLES),
    multiple=True,
    help="Role(s) to run (default: all but api).",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    default=None,
    help="Serve /metrics here (default: ES_SCHED_RUN_METRICS_PORT; 0: none).",
)
@click.option("--log-level", default="INFO", show_default=True)
@click.option(
    "--processes",
    type=click.IntRange(1, 64),
    default=1,
    show_default=True,
    help="Run the roles in this many supervised child processes (ADR 33).",
)
@click.option(
    "--max-restarts",
    type=click.IntRange(0),
    default=3,
    show_default=True,
    help="With --processes: restarts of a crash-looping child before its slot stays down.",
)
@click.option(
    "--replace",
    is_flag=True,
    help="Take the roles' instance ids over from a live process (it stops) (ADR 61).",
)
@click.option("--slot", type=int, default=None, hidden=True)  # set by the parent for a child
def run(
    role: tuple[str, ...],
    metrics_port: int | None,
    log_level: str,
    processes: int,
    max_restarts: int,
    replace: bool,
    slot: int | None,
) -> None:
    """Run es-sched roles until SIGINT or SIGTERM."""
    tag = "" if slot is None else f"[p{slot}] "
    logging.basicConfig(
        level=log_level.upper(), format=f"%(asctime)s %(levelname)s {tag}%(name)s: %(message)s"
    )
    settings = load_settings()
    stop = threading.Event()
    registry = Registry()
    port = settings.runtime.metrics_port if metrics_port is None else metrics_port

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        logging.getLogger("es_sched").info("signal %d: stopping", signum)
        stop.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    stacks.install()
    if processes > 1:
        if "api" in role:
            raise click.UsageError(
                "--processes does not multiply the api role: run it alone "
                "with `es-sched api --workers N`"
            )
        args = [a for r in role for a in ("--role", r)] + (["--replace"] if replace else [])

        def command(i: int) -> list[str]:
            return [
                sys.executable,
                "-m",
                "es_sched",
                "run",
                *args,
                "--log-level",
                log_level,
                "--metrics-port",
                str(port + i if port else 0),
                "--slot",
                str(i),
            ]

        def env(i: int) -> dict[str, str]:
            instance = slot_instance(settings.runtime.instance, i)
            return {**os.environ, "ES_SCHED_RUN_INSTANCE": instance}

        status = Supervisor(processes, command, env, max_restarts, STOP_GRACE_S + 5).run(stop)
        if status:
            raise EsSchedError("a child process failed (see the log above)")
        return
    failures: list[BaseException] = []
    names = role or ROLES
    keys = [(name, instance_of(name, settings.runtime.instance)) for name in names]
    # The process's liveness records go out through one producer: as its first role's
    # principal (every role may write the system topic, ADR 73).
    own = bootstrap.as_principal(settings, names[0])
    reader = roster.claim(own, keys, replace)

    def lost(reason: str) -> None:
        logging.getLogger("es_sched").error("%s: stopping", reason)
        failures.append(EsSchedError(reason))
        stop.set()

    beacon = roster.Beacon(own, keys, registry, reader, lost).start()
    try:
        _run_roles(names, settings, registry, port, stop, failures)
    finally:
        beacon.close()
    if failures:
        raise EsSchedError(f"{len(failures)} role(s) failed: {failures[0]}")


def instance_of(role: str, instance: str) -> str:
    """The instance a role's liveness record is keyed by: ``ES_SCHED_RUN_INSTANCE`` for the
    roles that hold it alone (ADR 61, ADR 79); with this process's host and pid for the
    projectors, which any number of processes share; an API process's host and pid."""
    if role in CLAIMED_ROLES:
        return instance
    return roster.process_instance("" if role == "api" else instance)


def _run_roles(
    names: tuple[str, ...],
    settings: Settings,
    registry: Registry,
    port: int,
    stop: threading.Event,
    failures: list[BaseException],
) -> None:
    def guarded(name: str, r: Role) -> None:
        try:
            logging.getLogger("es_sched").info("role %s started", name)
            r.run(stop)
        except BaseException as exc:
            logging.getLogger("es_sched").exception("role %s failed", name)
            failures.append(exc)
            stop.set()

    threads = [
        threading.Thread(
            target=guarded,
            args=(name, bootstrap.role(name, settings, registry)),
            name=name,
            daemon=True,
        )
        for name in names
    ]
    server = serve(registry, port)
    if server is not None:
        logging.getLogger("es_sched").info("metrics on :%d/metrics", port)
    for t in threads:
        t.start()
    stopping_since: float | None = None
    while any(t.is_alive() for t in threads):
        for t in threads:
            t.join(0.2)
        if stop.is_set():
            stopping_since = stopping_since or time.monotonic()
            if time.monotonic() - stopping_since > STOP_GRACE_S:
                stuck = [t.name for t in threads if t.is_alive()]
                failures.append(
                    EsSchedError(f"role(s) {stuck} did not stop within {STOP_GRACE_S:.0f}s")
                )
                logging.getLogger("es_sched").error("%s; exiting without them", failures[-1])
                stacks.log_stacks("did not stop", only=set(stuck))
                break
    if server is not None:
        server.shutdown()
