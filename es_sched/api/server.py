"""The ``api`` role: uvicorn serving the application until the role's stop event is set.

uvicorn installs signal handlers only on the main thread; in ``es-sched run`` the role runs in
a thread, so the stop event (set by ``run``'s own handlers) asks the server to exit, which
finishes requests in flight and runs the application's shutdown (closing its clients).
"""

from __future__ import annotations

import logging
import threading

import uvicorn
from fastapi import FastAPI

from es_sched.settings import ApiSettings

log = logging.getLogger(__name__)


class ApiServer:
    def __init__(self, settings: ApiSettings, app: FastAPI, port: int | None = None) -> None:
        self.config = uvicorn.Config(
            app,
            host=settings.host,
            port=settings.port if port is None else port,
            log_level="warning",
            access_log=False,
            timeout_graceful_shutdown=10,
        )
        self.server = uvicorn.Server(self.config)

    def run(self, stop: threading.Event) -> None:
        def watch() -> None:
            stop.wait()
            self.server.should_exit = True

        threading.Thread(target=watch, name="api-stop", daemon=True).start()
        log.info("API on http://%s:%d (console: /ui/)", self.config.host, self.config.port)
        self.server.run()
        stop.set()
