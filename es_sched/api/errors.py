"""Errors as Conductor's clients expect them: ``{status, code, message, validationErrors}``.

Conductor's ``ErrorResponse`` (``com.netflix.conductor.common.validation.ErrorResponse``) is
what its SDKs and UI parse from any 4xx/5xx; ``code`` is the textual kind (``NOT_FOUND``,
``INVALID_INPUT``, ``CONFLICT``, ...). Every refusal carries a reason a person can act on; a
request that fails validation lists each field in ``validationErrors`` (``{path, message,
invalidValue}``). Nothing below leaks a traceback; an unexpected error is logged with its
request and answered 500 with the error's class name.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import psycopg
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DataError
from starlette.exceptions import HTTPException as StarletteHTTPException

from es_sched.errors import ConfigError, EsSchedError, InfrastructureError, SchemaError

log = logging.getLogger(__name__)

CODES = {
    400: "INVALID_INPUT",
    401: "UNAUTHORIZED",
    403: "FORBIDDEN",
    404: "NOT_FOUND",
    405: "METHOD_NOT_ALLOWED",
    409: "CONFLICT",
    413: "PAYLOAD_TOO_LARGE",
    415: "UNSUPPORTED_MEDIA_TYPE",
    422: "INVALID_INPUT",
    429: "TOO_MANY_REQUESTS",
    500: "INTERNAL_ERROR",
    503: "BACKEND_ERROR",
    504: "TIMEOUT",
}
TOKEN_HEADER = "X-Es-Sched-Token"  # noqa: S105 - a header name: a write's read-your-writes token


class ApiError(EsSchedError):
    """A refusal with its HTTP status; ``validation`` lists field problems, if any."""

    def __init__(
        self,
        status: int,
        message: str,
        validation: list[dict[str, Any]] | None = None,
        error: str | None = None,
        token: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.validation = validation or []
        self.error = error  # the token protocol's word on a 401 (ADR 25), added to the body
        # A write's read-your-writes token (ADR 56): in the body and ``X-Es-Sched-Token``, so a
        # client told "not visible yet" can wait for it with ``?after=``.
        self.token = token
        self.headers = headers or {}  # e.g. a 429's Retry-After


def body(status: int, message: str, validation: list[dict[str, Any]] | None = None) -> JSON:
    return {
        "status": status,
        "code": CODES.get(status, "ERROR"),
        "message": message,
        "validationErrors": validation or [],
    }


JSON = dict[str, Any]


def _answer(status: int, message: str, validation: list[JSON] | None = None) -> JSONResponse:
    return JSONResponse(body(status, message, validation), status_code=status)


HANDLED: tuple[type[Exception], ...] = (
    ApiError,
    StarletteHTTPException,
    RequestValidationError,
    SchemaError,
    ConfigError,
    InfrastructureError,
    DataError,
    EsSchedError,
    Exception,
)


def install(app: FastAPI) -> None:
    """Register ``answer`` for every failure, so each becomes Conductor's error body."""

    async def handler(request: Request, exc: Exception) -> JSONResponse:
        return answer(request, exc)

    for kind in HANDLED:
        app.add_exception_handler(kind, handler)


def _api_error(exc: ApiError) -> JSONResponse:
    if exc.error is not None:
        extra = {"error": exc.error}
        return JSONResponse({**body(exc.status, exc.message), **extra}, exc.status)
    if exc.token is not None:
        return JSONResponse(
            {**body(exc.status, exc.message, exc.validation), "token": exc.token},
            exc.status,
            headers={TOKEN_HEADER: exc.token},
        )
    return _answer(exc.status, exc.message, exc.validation)


def answer(request: Request, exc: Exception) -> JSONResponse:
    """The response to ``exc`` raised while serving ``request``: the one place that maps a
    failure to its status and body (the handlers ``install`` registers, and the lean worker
    routes of ``es_sched.api.conductor.lean``, which run outside FastAPI's handlers)."""
    if isinstance(exc, ApiError):
        response = _api_error(exc)
        response.headers.update(exc.headers)
        return response
    if isinstance(exc, StarletteHTTPException):
        response = _answer(exc.status_code, str(exc.detail))
        for name, value in (exc.headers or {}).items():
            response.headers[name] = value
        return response
    if isinstance(exc, RequestValidationError):
        problems = [
            {
                "path": ".".join(str(p) for p in err.get("loc", ())),
                "message": str(err.get("msg", "invalid")),
                "invalidValue": _printable(err.get("input")),
            }
            for err in exc.errors()
        ]
        summary = "; ".join(f"{p['path']}: {p['message']}" for p in problems)
        return _answer(400, f"invalid request: {summary}", problems)
    if isinstance(exc, InfrastructureError):
        log.warning("%s %s: backend unavailable: %s", request.method, request.url.path, exc)
        return _answer(503, f"a backend is unavailable: {exc}")
    if isinstance(exc, SchemaError | ConfigError | EsSchedError):
        return _answer(400, str(exc))
    if isinstance(exc, DataError | psycopg.DataError):
        # PostgreSQL refused a value the request carried into a query (a NUL character in an
        # id, a number out of range): the request's fault, found by fuzzing the bulk routes;
        # psycopg's own on the reads that run on asyncio (ADR 37), found by fuzzing search.
        why = exc.orig if isinstance(exc, DataError) else exc
        first = str(why).strip().splitlines()[0] if why else type(exc).__name__
        log.info("%s %s: the database refused a value: %s", request.method, request.url.path, first)
        return _answer(400, f"a value in the request cannot be used: {first}")
    log.error("%s %s failed", request.method, request.url.path, exc_info=exc)
    return _answer(500, f"internal error ({type(exc).__name__}); see the API's log")


def _printable(value: Any) -> Any:
    """The refused value as the answer shows it: bounded, and text UTF-8 can encode (a lone
    surrogate escape in a JSON body decodes to a ``str`` no response can hold, NaN to a float
    no JSON can: found by the hostile input campaign, ADR 75, as 500s where a 400 was due)."""
    if value is None or isinstance(value, int | bool):
        return value
    if isinstance(value, float) and math.isfinite(value):
        return value  # NaN and 1e400 (infinity) decode from a body, but JSON holds neither
    text = value if isinstance(value, str) else repr(value)
    text = text.encode("utf-8", "backslashreplace").decode()
    return text if len(text) <= 200 else text[:197] + "..."
