"""Conductor's restart and rerun routes send one command each, with the caller as actor, and
answer as Conductor does (204, the id as text/plain, BulkResponse); bad requests get a 4xx
with a reason. The decider's verdict is not theirs to give (ADR 23): see the core's tests."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from fastapi.testclient import TestClient

from es_sched import bootstrap
from es_sched.api.app import create_app
from es_sched.api.conductor import rerun as routes
from es_sched.api.services import Lazy
from es_sched.commands import Submitted
from es_sched.commands.prepare import UnknownDefinition
from es_sched.settings import ApiSettings, load_settings
from tests.unit.api.writes_support import fake_settler


class FakeCommands:
    def __init__(self) -> None:
        self.sent: list[tuple[str, str, dict[str, Any]]] = []

    def restart(self, wf_id: str, **kwargs: Any) -> Submitted:
        if kwargs.get("latest_of") == "gone":
            raise UnknownDefinition("gone", None)
        self.sent.append(("restart", wf_id, kwargs))
        return Submitted(wf_id, "c1")

    def rerun(self, wf_id: str, **kwargs: Any) -> Submitted:
        self.sent.append(("rerun", wf_id, kwargs))
        return Submitted(wf_id, "c1")

    def close(self) -> None:
        pass


ROWS = {"wf-1": {"name": "media", "correlation_id": "asset-1"}, "wf-2": {"name": "gone"}}


@pytest.fixture
def app(monkeypatch: pytest.MonkeyPatch) -> tuple[TestClient, FakeCommands]:
    fake = FakeCommands()
    settings = load_settings()
    settings = replace(settings, api=ApiSettings(auth="off"))  # the operator is "anonymous"
    svc = bootstrap.api_services(settings)
    svc.commands = Lazy(lambda: fake)  # type: ignore[arg-type,return-value]
    fake_settler(svc, {"nope": ("unknown workflow 'nope': restart_workflow refused", True)})

    def row(_svc: Any, workflow_id: str) -> dict[str, Any] | None:
        return ROWS.get(workflow_id)

    monkeypatch.setattr(routes, "_row", row)
    return TestClient(create_app(svc)), fake


def test_restart_answers_204_and_sends_the_caller_as_actor(app: Any) -> None:
    client, fake = app
    response = client.post("/api/workflow/wf-1/restart")
    assert response.status_code == 204 and response.content == b""
    assert fake.sent == [("restart", "wf-1", {"latest_of": None, "actor": "anonymous"})]


def test_restart_with_latest_definitions_names_the_workflows_definition(app: Any) -> None:
    client, fake = app
    assert client.post("/api/workflow/wf-1/restart?useLatestDefinitions=true").status_code == 204
    assert fake.sent[0][2]["latest_of"] == "media"
    # A workflow the read model does not show goes to the decider; its "no such workflow" is
    # the 404, with its reason.
    unknown = client.post("/api/workflow/nope/restart?useLatestDefinitions=true")
    assert unknown.status_code == 404 and "unknown workflow 'nope'" in unknown.json()["message"]
    assert fake.sent[-1][:2] == ("restart", "nope")


def test_rerun_answers_the_workflow_id_as_text(app: Any) -> None:
    client, fake = app
    body = {
        "reRunFromWorkflowId": "wf-1",
        "reRunFromTaskId": "t-7",
        "taskInput": {"crf": 20},
        "workflowInput": {"src": "b"},
        "correlationId": "asset-1",
    }
    response = client.post("/api/workflow/wf-1/rerun", json=body)
    assert response.status_code == 200 and response.text == "wf-1"
    assert response.headers["content-type"].startswith("text/plain")
    assert fake.sent == [
        (
            "rerun",
            "wf-1",
            {
                "task": "t-7",
                "task_input": {"crf": 20},
                "workflow_input": {"src": "b"},
                "actor": "anonymous",
            },
        )
    ]


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ({"reRunFromWorkflowId": "other"}, "not the workflow in the path"),
        ({"correlationId": "another"}, "correlationId"),
        ({"taskInput": "not an object"}, "taskInput"),
    ],
)
def test_a_bad_rerun_request_is_a_400_with_a_reason(app: Any, body: Any, reason: str) -> None:
    client, fake = app
    response = client.post("/api/workflow/wf-1/rerun", json=body)
    assert response.status_code == 400 and reason in response.json()["message"]
    assert fake.sent == []


def test_bulk_restart_lists_successes_and_errors(app: Any) -> None:
    client, fake = app
    response = client.post(
        "/api/workflow/bulk/restart?useLatestDefinitions=true", json=["wf-1", "wf-2", "nope"]
    )
    assert response.status_code == 200
    body = response.json()
    assert body["bulkSuccessfulResults"] == ["wf-1"]
    assert set(body["bulkErrorResults"]) == {"wf-2", "nope"}
    assert "unknown workflow 'nope'" in body["bulkErrorResults"]["nope"]
    assert "'gone'" in body["bulkErrorResults"]["wf-2"]
    assert "POST /api/metadata/workflow" in body["bulkErrorResults"]["wf-2"]
    assert [s[1] for s in fake.sent] == ["wf-1", "nope"]


@pytest.mark.parametrize(
    "path", ["/api/workflow/wf-1/restart", "/api/workflow/wf-1/rerun", "/api/workflow/bulk/restart"]
)
def test_every_route_requires_an_authenticated_operator(path: str) -> None:
    svc = bootstrap.api_services(replace(load_settings(), api=ApiSettings(auth="on")))
    fake = FakeCommands()
    svc.commands = Lazy(lambda: fake)  # type: ignore[arg-type,return-value]
    response = TestClient(create_app(svc)).post(path, json=["wf-1"] if "bulk" in path else {})
    assert response.status_code == 401 and fake.sent == []
