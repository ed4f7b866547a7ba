"""``es-sched api``: serve the HTTP API and console; ``es-sched api keys ...``: its API keys."""

from __future__ import annotations

import logging
import signal
import threading
from types import FrameType

import click

from es_sched import bootstrap
from es_sched.settings import load_settings


@click.group("api", invoke_without_command=True)
@click.option("--host", default=None, help="Listen here (default: ES_SCHED_API_HOST).")
@click.option(
    "--port", type=click.IntRange(0, 65535), default=None,
    help="Listen on this port (default: ES_SCHED_API_PORT, 8080).",
)  # fmt: skip
@click.option("--log-level", default="INFO", show_default=True)
@click.pass_context
def api(ctx: click.Context, host: str | None, port: int | None, log_level: str) -> None:
    """Serve the Conductor-compatible REST API (/api), the native API (/api/v1) and the
    console (/ui) until SIGINT or SIGTERM."""
    if ctx.invoked_subcommand is not None:
        return
    from es_sched.api.app import create_app  # noqa: PLC0415 (FastAPI only for this command)
    from es_sched.api.server import ApiServer  # noqa: PLC0415

    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    settings = load_settings()
    if host is not None:
        settings = bootstrap.with_api_host(settings, host)
    stop = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    app = create_app(bootstrap.api_services(settings))
    ApiServer(settings.api, app, port=port).run(stop)
