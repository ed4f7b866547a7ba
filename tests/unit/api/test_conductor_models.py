"""Read-model rows as Conductor's JSON, checked against the conductor-python SDK's own models
(its deserializer refuses a status or type it does not know), and the refusals the workflow
resource answers before it touches Kafka or PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from conductor.client.configuration.configuration import Configuration
from conductor.client.http.api_client import ApiClient
from fastapi.testclient import TestClient

from es_sched import bootstrap
from es_sched.api.app import create_app
from es_sched.api.conductor import models
from es_sched.settings import ApiSettings, load_settings

T0 = datetime(2026, 11, 30, 12, 0, 0, 123000, UTC)
MS0 = 1_796_040_000_123


def _wf(**over: Any) -> dict[str, Any]:
    row = {
        "workflow_id": "w1",
        "name": "media.ingest",
        "def_version": 2,
        "tenant": None,
        "priority": 3,
        "status": "RUNNING",
        "ending": None,
        "reason": "",
        "correlation_id": "order-7",
        "parent_workflow_id": None,
        "input": {"a": 1},
        "output": {},
        "created_at": T0,
        "updated_at": T0 + timedelta(seconds=2),
        "ended_at": None,
        "version": 5,
    }
    return {**row, **over}


def _task(**over: Any) -> dict[str, Any]:
    row = {
        "task_id": "t1",
        "workflow_id": "w1",
        "ref": "probe",
        "name": "media.probe",
        "task_type": "media.probe",
        "attempt": 2,
        "iteration": 0,
        "status": "FAILED",
        "worker_id": "wk-1",
        "lease_epoch": 1,
        "reason": "boom",
        "resources": {},
        "input": {"x": 1},
        "output": {},
        "progress": 0.0,
        "scheduled_at": T0,
        "started_at": T0 + timedelta(seconds=1),
        "ended_at": None,
        "retried": False,
        "version": 4,
    }
    return {**row, **over}


def _sdk(data: Any, klass: str) -> Any:
    return ApiClient(Configuration(server_api_url="http://127.0.0.1:9/api")).deserialize_class(
        data, klass
    )


def test_epoch_ms_and_summary_times() -> None:
    assert models.epoch_ms(T0) == MS0
    assert models.epoch_ms(None) == 0
    assert models.iso(T0) == "2026-11-30T12:00:00.123Z"
    assert models.iso(None) == ""


def test_workflow_json_has_conductors_names_and_the_sdk_reads_it() -> None:
    body = models.workflow(
        _wf(),
        [_task(), _task(task_id="t2", attempt=1, status="SCHEDULED", ref="thumb", started_at=None)],
    )
    data = body.model_dump(mode="json")
    assert data["workflowId"] == "w1"
    assert data["workflowName"] == "media.ingest"
    assert data["workflowVersion"] == 2
    assert data["createTime"] == data["startTime"] == MS0
    assert data["endTime"] == 0
    assert data["failedReferenceTaskNames"] == ["probe"]
    first = data["tasks"][0]
    assert first["taskId"] == "t1"
    assert first["referenceTaskName"] == "probe"
    assert first["retryCount"] == 1  # the second attempt is Conductor's first retry
    assert first["seq"] == 1
    assert first["startTime"] == MS0 + 1000
    assert first["reasonForIncompletion"] == "boom"
    assert first["workflowInstanceId"] == "w1"
    assert data["tasks"][1]["seq"] == 2
    assert data["tasks"][1]["startTime"] == 0
    wf = _sdk(data, "Workflow")
    assert wf.workflow_id == "w1"
    assert wf.status == "RUNNING"
    assert wf.tasks[0].reference_task_name == "probe"
    assert wf.tasks[0].retry_count == 1


def test_without_tasks_the_list_is_empty() -> None:
    assert models.workflow(_wf(), [_task()], include_tasks=False).tasks == []


def test_a_canceled_workflow_reads_as_terminated() -> None:
    # The SDK refuses statuses it does not know; CANCELED is es-sched's own.
    data = models.workflow(_wf(status="CANCELED", reason="canceled: x", ended_at=T0), [])
    assert data.status == "TERMINATED"
    assert _sdk(data.model_dump(mode="json"), "Workflow").status == "TERMINATED"
    assert models.summary(_wf(status="CANCELED"))["status"] == "TERMINATED"


def test_summary_is_conductors_workflow_summary() -> None:
    ended = _wf(status="COMPLETED", ended_at=T0 + timedelta(seconds=3), output={"ok": True})
    data = models.summary(ended)
    # The plain object search answers is the model the OpenAPI document describes, exactly.
    assert models.WorkflowSummary.model_validate(data).model_dump(mode="json") == data
    assert list(data) == list(models.WorkflowSummary.model_fields)
    assert data["workflowType"] == "media.ingest"
    assert data["startTime"] == "2026-11-30T12:00:00.123Z"
    assert data["endTime"] == "2026-11-30T12:00:03.123Z"
    # Another zone reads as the same instant in UTC.
    later = _wf(created_at=T0.astimezone(timezone(timedelta(hours=-5))))
    assert models.summary(later)["startTime"] == "2026-11-30T12:00:00.123Z"
    assert data["executionTime"] == 3000
    assert data["input"] == '{"a":1}'
    assert data["output"] == '{"ok":true}'
    found = _sdk({"totalHits": 1, "results": [data]}, "SearchResultWorkflowSummary")
    assert found.total_hits == 1
    assert found.results[0].workflow_id == "w1"
    assert found.results[0].status == "COMPLETED"


@pytest.fixture(scope="module")
def client() -> TestClient:
    settings = load_settings()
    settings = type(settings)(**{**settings.__dict__, "api": ApiSettings(auth="off")})
    return TestClient(create_app(bootstrap.api_services(settings)))


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ({"name": "x", "taskToDomain": {"*": "gpu"}}, "no task domains"),
        ({"name": "x", "workflowDef": {"name": "x", "tasks": []}}, "POST /api/metadata/workflow"),
        ({"name": "x", "priority": 50}, "0 (highest) to 8"),
        ({"name": "x", "idempotencyKey": "k", "idempotencyStrategy": "FAIL"}, "RETURN_EXISTING"),
        ({"input": {}}, "name"),
    ],
)
def test_start_refuses_what_es_sched_cannot_honour(
    client: TestClient, body: dict[str, Any], named: str
) -> None:
    answer = client.post("/api/workflow", json=body)
    assert answer.status_code == 400, answer.text
    assert named in answer.json()["message"]
    assert answer.json()["code"] == "INVALID_INPUT"


@pytest.mark.parametrize(
    ("params", "named"),
    [
        ({"query": "owner = bob"}, "unknown field 'owner'"),
        ({"query": "status = RUNNING OR status = FAILED"}, "only AND"),
        ({"sort": "owner:DESC"}, "sort: unknown field"),
        ({"size": "5000"}, "size"),
    ],
)
def test_search_refuses_a_query_it_cannot_honour(
    client: TestClient, params: dict[str, str], named: str
) -> None:
    answer = client.get("/api/workflow/search", params=params)
    assert answer.status_code == 400, answer.text
    assert named in answer.json()["message"]


def test_bulk_takes_a_list_of_ids(client: TestClient) -> None:
    answer = client.put("/api/workflow/bulk/pause", json={"ids": ["a"]})
    assert answer.status_code == 400
    assert answer.json()["validationErrors"]
