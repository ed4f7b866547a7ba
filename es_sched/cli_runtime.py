"""``es-sched run``: the long-running roles, one process each or all in one.

``--role decider|timers|retry`` runs one role; without ``--role`` all three run in threads of one
process (development). SIGINT/SIGTERM stop the roles cleanly: the current transaction finishes,
the consumer leaves its group.
"""

from __future__ import annotations

import importlib
import logging
import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Protocol

import click

from es_sched.adapters.javascript import QuickJsEngine
from es_sched.errors import EsSchedError
from es_sched.runtime.decider import Decider
from es_sched.settings import Settings, load_settings

ROLES = ("decider", "timers", "retry", "dispatcher")


class Role(Protocol):
    def run(self, stop: threading.Event) -> None: ...


def _optional(module: str, name: str) -> Callable[[Settings], Role]:
    def make(settings: Settings) -> Role:
        cls = getattr(importlib.import_module(module), name)
        role: Role = cls(settings)
        return role

    return make


BUILDERS: dict[str, Callable[[Settings], Role]] = {
    "decider": lambda s: Decider(s, QuickJsEngine()),
    "timers": _optional("es_sched.runtime.timer_service", "TimerService"),
    "retry": _optional("es_sched.runtime.retry_relay", "RetryRelay"),
    "dispatcher": _optional("es_sched.runtime.dispatcher", "Dispatcher"),
}


@click.command("run")
@click.option(
    "--role", type=click.Choice(ROLES), multiple=True, help="Role(s) to run (default: all)."
)
@click.option("--log-level", default="INFO", show_default=True)
def run(role: tuple[str, ...], log_level: str) -> None:
    """Run es-sched roles until SIGINT or SIGTERM."""
    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    settings = load_settings()
    stop = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        logging.getLogger("es_sched").info("signal %d: stopping", signum)
        stop.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    failures: list[BaseException] = []

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
            target=guarded, args=(name, BUILDERS[name](settings)), name=name, daemon=True
        )
        for name in (role or ROLES)
    ]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        for t in threads:
            t.join(0.2)
    if failures:
        raise EsSchedError(f"{len(failures)} role(s) failed: {failures[0]}")
