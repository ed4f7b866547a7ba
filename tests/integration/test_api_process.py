"""``es-sched api`` as a process: it serves its OpenAPI document and answers Conductor's error
body for a resource that does not exist."""

from __future__ import annotations

import pytest

from testkit.api import api
from testkit.runtime import Env

pytestmark = pytest.mark.integration


def test_the_api_process_serves_its_document_and_errors() -> None:
    env = Env()
    with api(env) as server:
        doc = server.http.get("/openapi.json").json()
        assert doc["info"]["title"] == "es-sched"
        missing = server.http.get("/api/nothing-here")
        assert missing.status_code == 404
        assert missing.json()["code"] == "NOT_FOUND"
