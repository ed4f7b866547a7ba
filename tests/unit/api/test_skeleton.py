"""The application's frame: Conductor's error body on every refusal, auth off only on loopback."""

from __future__ import annotations

import psycopg
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy.exc import DataError

from es_sched import bootstrap
from es_sched.api import errors
from es_sched.api.app import create_app
from es_sched.errors import ConfigError
from es_sched.settings import ApiSettings, load_settings


def test_unknown_route_answers_conductors_error_body() -> None:
    client = TestClient(create_app(bootstrap.api_services(load_settings())))
    response = client.get("/api/no-such-resource")
    assert response.status_code == 404
    body = response.json()
    assert body["status"] == 404
    assert body["code"] == "NOT_FOUND"
    assert body["message"]
    assert body["validationErrors"] == []


def test_openapi_document_is_served() -> None:
    client = TestClient(create_app(bootstrap.api_services(load_settings())))
    doc = client.get("/openapi.json").json()
    assert doc["info"]["title"] == "es-sched"


@pytest.mark.parametrize("host", ["0.0.0.0", "10.1.2.3", "api.example.com"])  # noqa: S104
def test_auth_off_is_refused_off_loopback(host: str) -> None:
    with pytest.raises(ValueError, match="loopback"):
        ApiSettings(auth="off", host=host)


@pytest.mark.parametrize("host", ["127.0.0.1", "::1", "localhost", "127.8.0.1"])
def test_auth_off_is_allowed_on_loopback(host: str) -> None:
    assert ApiSettings(auth="off", host=host).auth == "off"


def test_cli_host_override_is_validated_again() -> None:
    settings = load_settings()
    off = bootstrap.with_api_host(settings, "127.0.0.1")
    off = type(off)(**{**off.__dict__, "api": ApiSettings(auth="off")})
    with pytest.raises(ConfigError, match="loopback"):
        bootstrap.with_api_host(off, "0.0.0.0")  # noqa: S104


def test_a_value_the_database_refuses_is_the_requests_fault() -> None:

    app = FastAPI()
    errors.install(app)

    @app.get("/probe")
    def probe() -> None:
        raise DataError(
            "SELECT 1",
            {},
            psycopg.errors.DataError("A string literal cannot contain NUL (0x00) characters."),
        )

    @app.get("/probe-async")
    async def probe_async() -> None:  # the reads on asyncio raise psycopg's own (ADR 37)
        raise psycopg.errors.NumericValueOutOfRange("bigint out of range")

    client = TestClient(app, raise_server_exceptions=False)
    answer = client.get("/probe")
    assert answer.status_code == 400
    assert "NUL" in answer.json()["message"]
    answer = client.get("/probe-async")
    assert answer.status_code == 400, answer.text
    assert answer.json()["message"] == "a value in the request cannot be used: bigint out of range"


def test_a_lone_surrogate_in_a_refused_body_is_a_400_not_a_500() -> None:
    # Found by the hostile input campaign (ADR 75): the refused value was echoed as it was
    # decoded, a str no response can encode.
    app = FastAPI()
    errors.install(app)

    @app.post("/probe")
    def probe(body: dict[str, int]) -> None:
        return None

    client = TestClient(app, raise_server_exceptions=False)
    response = client.post(
        "/probe",
        content=b'{"n": "\\ud800' + b"x" * 500 + b'"}',
        headers={"Content-Type": "application/json"},
    )
    assert response.status_code == 400, response.text
    [problem] = response.json()["validationErrors"]
    assert problem["invalidValue"].startswith("\\ud800x") and len(problem["invalidValue"]) == 200
    for number in (b"NaN", b"1e400", b"-Infinity"):
        response = client.post(
            "/probe",
            content=b'{"n": ' + number + b"}",
            headers={"Content-Type": "application/json"},
        )
        assert response.status_code == 400, response.text
        [problem] = response.json()["validationErrors"]
        assert problem["invalidValue"] in ("nan", "inf", "-inf")
