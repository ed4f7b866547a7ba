"""The application: every router, the error handlers, the services on ``app.state``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.responses import RedirectResponse

from es_sched import __version__
from es_sched.api import errors, tokens
from es_sched.api.conductor import metadata, rerun, tasks, workflows
from es_sched.api.conductor.lean import LeanWorkerRoutes
from es_sched.api.native import routes as native
from es_sched.api.services import Services
from es_sched.api.ui import editor, login, ops, review, system
from es_sched.api.ui import routes as ui
from es_sched.api.ui.render import static


def create_app(svc: Services) -> FastAPI:
    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        try:
            yield
        finally:
            svc.close()

    app = FastAPI(
        title="es-sched",
        version=__version__,
        description=(
            "Conductor-compatible REST under /api, the native API under /api/v1, "
            "the console under /ui."
        ),
        lifespan=lifespan,
    )
    app.state.services = svc
    errors.install(app)
    for module in (
        tokens,
        workflows,
        rerun,
        metadata,
        tasks,
        native,
        ui,
        ops,
        review,
        system,
        editor,
        login,
    ):
        app.include_router(module.router)
    app.mount("/ui/static", static, name="static")
    if svc.settings.api.lean_worker_routes:  # ADR 36: the hot worker routes outside FastAPI
        app.add_middleware(LeanWorkerRoutes, svc=svc)

    @app.get("/", include_in_schema=False)
    def _root() -> RedirectResponse:
        return RedirectResponse("/ui/")

    return app
