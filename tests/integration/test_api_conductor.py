"""Conductor's REST resources on a live stack: ``es-sched api`` next to the decider, both
projectors and a scripted worker, driven over HTTP as a Conductor client drives them, and then
by the real conductor-python SDK.

Every read of a write waits on the read model (``wait_until`` on the GET), never on time.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
from conductor.client.configuration.configuration import Configuration
from conductor.client.http.models import StartWorkflowRequest, TaskDef, WorkflowDef, WorkflowTask
from conductor.client.http.rest import ApiException
from conductor.client.orkes_clients import OrkesClients
from sqlalchemy import select

from es_sched import bootstrap
from es_sched.projections.postgres.models import EVENTS
from testkit.api import Api, api
from testkit.runtime import Env, Worker, roles
from testkit.wait import wait_until

pytestmark = pytest.mark.integration

STEP = {"name": "api.step", "retryCount": 0, "timeoutSeconds": 60, "responseTimeoutSeconds": 30}
FLOW = {
    "name": "api.flow",
    "version": 1,
    "schemaVersion": 2,
    "tasks": [
        {
            "name": "api.step",
            "taskReferenceName": "step",
            "type": "SIMPLE",
            "inputParameters": {"fail": "${workflow.input.fail}"},
        }
    ],
}
GATE = {
    "name": "api.gate",
    "version": 1,
    "schemaVersion": 2,
    "tasks": [
        {"name": "gate", "taskReferenceName": "gate", "type": "WAIT"},
        {"name": "api.step", "taskReferenceName": "after", "type": "SIMPLE"},
    ],
}


def fails_first_attempt(task: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The worker: a step asked to fail fails its first attempt, so a retry completes it."""
    if (task.get("input") or {}).get("fail") and task["attempt"] == 1:
        return "FAILED", {}
    return "COMPLETED", {"done": task["ref"]}


@contextmanager
def stack() -> Iterator[tuple[Env, Api]]:
    env = Env()
    env.create()
    with (
        roles(env, "decider", "projector-pg", "projector-search"),
        Worker(env, fails_first_attempt),
        api(env) as server,
    ):
        yield env, server


def status_of(http: httpx.Client, workflow_id: str) -> str | None:
    answer = http.get(f"/api/workflow/{workflow_id}")
    return str(answer.json()["status"]) if answer.status_code == 200 else None


def wait_status(http: httpx.Client, workflow_id: str, status: str, timeout_s: float = 60) -> None:
    wait_until(
        lambda: status_of(http, workflow_id) == status,
        timeout_s,
        lambda: f"{workflow_id} {status} (now {status_of(http, workflow_id)})",
    )


def search(http: httpx.Client, **params: Any) -> dict[str, Any]:
    answer = http.get("/api/workflow/search", params=params)
    assert answer.status_code == 200, answer.text
    assert answer.headers["X-Es-Sched-Reflects"]
    body: dict[str, Any] = answer.json()
    return body


def found_ids(http: httpx.Client, **params: Any) -> set[str]:
    return {r["workflowId"] for r in search(http, **params)["results"]}


def push_definitions(http: httpx.Client) -> None:
    assert http.post("/api/metadata/taskdefs", json=[STEP]).status_code == 200
    assert http.post("/api/metadata/workflow", json=FLOW).status_code == 200
    answer = http.put("/api/metadata/workflow", json=[GATE])
    assert answer.status_code == 200, answer.text
    assert answer.json()["bulkSuccessfulResults"] == ["api.gate"]
    assert http.get("/api/metadata/taskdefs/api.step").json()["retryCount"] == 0
    assert http.get("/api/metadata/workflow/api.flow", params={"version": 1}).json() == FLOW
    assert {d["name"] for d in http.get("/api/metadata/workflow").json()} >= {
        "api.flow",
        "api.gate",
    }
    refused = http.post("/api/metadata/workflow", json={**FLOW, "version": 2, "tasks": [{}]})
    assert refused.status_code == 400, refused.text
    assert refused.json()["validationErrors"]
    assert http.get("/api/metadata/workflow/api.flow", params={"version": 2}).status_code == 404
    exists = http.post("/api/metadata/workflow", params={"overwrite": "false"}, json=FLOW)
    assert exists.status_code == 409


def actors_of(env: Env, workflow_id: str, event_type: str) -> list[str | None]:
    """The ``actor`` of each archived event of ``event_type`` of ``workflow_id``."""
    e = EVENTS.c
    query = select(e.actor).where(e.workflow_id == workflow_id, e.type == event_type)
    with bootstrap.pg_store(env.settings).engine.connect() as conn:
        return [row[0] for row in conn.execute(query.order_by(e.seq))]


def test_conductor_workflow_resource_on_a_live_stack() -> None:
    tag = uuid.uuid4().hex[:10]
    with stack() as (env, server):
        http = server.http
        push_definitions(http)

        # Start both ways; the answer is the id as text/plain.
        started = http.post(
            "/api/workflow",
            json={
                "name": "api.flow",
                "version": 1,
                "correlationId": f"corr-{tag}",
                "input": {"note": f"banana{tag}"},
            },
        )
        assert started.status_code == 200, started.text
        assert started.headers["content-type"].startswith("text/plain")
        assert started.headers["X-Es-Sched-Token"]
        ok_id = started.text
        failing = http.post(
            "/api/workflow/api.flow", params={"correlationId": f"corr-{tag}"}, json={"fail": True}
        )
        assert failing.status_code == 200, failing.text
        bad_id = failing.text
        unknown = http.post("/api/workflow/api.nothing", json={})
        assert unknown.status_code == 404
        assert "api.nothing" in unknown.json()["message"]
        assert "POST /api/metadata/workflow" in unknown.json()["message"]  # HTTP, not the CLI
        # A start answers once the read model has it (ADR 56): the next read sees it.
        assert http.get(f"/api/workflow/{ok_id}").status_code == 200

        wait_status(http, ok_id, "COMPLETED")
        wait_status(http, bad_id, "FAILED")
        got = http.get(f"/api/workflow/{ok_id}", params={"includeTasks": "true"})
        assert got.headers["X-Es-Sched-Reflects"]
        body = got.json()
        print("GET /api/workflow/{id}:", body)
        assert body["workflowName"] == "api.flow"
        assert body["correlationId"] == f"corr-{tag}"
        assert body["input"] == {"note": f"banana{tag}"}
        assert body["endTime"] >= body["startTime"] > 0
        [task] = body["tasks"]
        assert (task["referenceTaskName"], task["status"], task["seq"]) == ("step", "COMPLETED", 1)
        assert task["outputData"] == {"done": "step"}
        failed = http.get(f"/api/workflow/{bad_id}").json()
        assert failed["failedReferenceTaskNames"] == ["step"]
        assert failed["tasks"][0]["reasonForIncompletion"]

        # Search: Conductor's query syntax, then free text through the search store.
        wait_until(
            lambda: found_ids(http, query=f'correlationId="corr-{tag}"') == {ok_id, bad_id},
            60,
            "both workflows by correlation id",
        )
        both = search(http, query=f"correlationId = corr-{tag} AND status IN (COMPLETED)")
        assert [r["workflowId"] for r in both["results"]] == [ok_id]
        assert both["totalHits"] == 1
        ordered = search(http, query=f"correlationId='corr-{tag}'", sort="startTime:ASC")
        assert [r["workflowId"] for r in ordered["results"]] == [ok_id, bad_id]
        wait_until(
            lambda: found_ids(http, freeText=f"banana{tag}") == {ok_id}, 60, "the free-text hit"
        )
        assert found_ids(http, freeText=f"banana{tag}", query="status=FAILED") == set()
        refused = http.get("/api/workflow/search", params={"query": "colour = red"})
        assert refused.status_code == 400
        assert "colour" in refused.json()["message"]

        # Retry the failed one: its second attempt completes.
        assert http.post(f"/api/workflow/{bad_id}/retry").status_code == 200
        wait_status(http, bad_id, "COMPLETED")
        retried = http.get(f"/api/workflow/{bad_id}").json()["tasks"]
        assert [t["retryCount"] for t in retried] == [0, 1]

        # Pause, resume, terminate a workflow waiting at a WAIT task.
        gate = [http.post("/api/workflow/api.gate", json={"n": i}).text for i in range(4)]
        for wf in gate:
            wait_status(http, wf, "RUNNING")
        assert http.put(f"/api/workflow/{gate[0]}/pause").status_code == 200
        wait_status(http, gate[0], "PAUSED")
        assert http.put(f"/api/workflow/{gate[0]}/resume").status_code == 200
        wait_status(http, gate[0], "RUNNING")
        assert (
            http.delete(f"/api/workflow/{gate[0]}", params={"reason": "by test"}).status_code == 200
        )
        wait_status(http, gate[0], "TERMINATED")
        assert http.get(f"/api/workflow/{gate[0]}").json()["reasonForIncompletion"]
        # Who did it: the caller (anonymous with auth off) is on the events it caused (ADR 27).
        assert actors_of(env, gate[0], "workflow.ending") == ["anonymous"]
        assert actors_of(env, gate[0], "workflow.paused") == ["anonymous"]
        ended = http.put(f"/api/workflow/{ok_id}/pause")
        assert ended.status_code == 409
        assert "COMPLETED" in ended.json()["message"]
        missing = http.get(f"/api/workflow/nope-{tag}")
        assert missing.status_code == 404
        assert missing.json()["code"] == "NOT_FOUND"
        # An action on a workflow the read model does not have goes to the decider; its "no
        # such workflow" is the 404, with its reason.
        absent = http.delete(f"/api/workflow/nope-{tag}")
        assert absent.status_code == 404, absent.text
        assert f"unknown workflow 'nope-{tag}'" in absent.json()["message"]

        # Bulk: what cannot apply goes to bulkErrorResults with the reason (the read model's
        # for an ended workflow, the decider's for one it has no history of).
        paused = http.put("/api/workflow/bulk/pause", json=[gate[1], gate[2], ok_id, f"nope-{tag}"])
        assert paused.status_code == 200, paused.text
        result = paused.json()
        print("bulk pause:", result)
        assert result["bulkSuccessfulResults"] == [gate[1], gate[2]]
        assert "COMPLETED" in result["bulkErrorResults"][ok_id]
        assert "unknown workflow" in result["bulkErrorResults"][f"nope-{tag}"]
        for wf in gate[1:3]:
            wait_status(http, wf, "PAUSED")
        resumed = http.put("/api/workflow/bulk/resume", json=[gate[1]]).json()
        assert resumed["bulkSuccessfulResults"] == [gate[1]]
        wait_status(http, gate[1], "RUNNING")
        gone = http.post(
            "/api/workflow/bulk/terminate",
            params={"reason": "bulk test"},
            json=[gate[1], gate[2], gate[3]],
        ).json()
        assert gone["bulkSuccessfulResults"] == [gate[1], gate[2], gate[3]]
        for wf in gate[1:]:
            wait_status(http, wf, "TERMINATED")
        retried_bulk = http.post("/api/workflow/bulk/retry", json=[f"nope-{tag}"]).json()
        assert list(retried_bulk["bulkErrorResults"]) == [f"nope-{tag}"]
        terminated = found_ids(http, query="workflowType=api.gate AND status=TERMINATED")
        assert terminated >= set(gate)


def test_the_conductor_python_sdk_drives_the_api_unchanged() -> None:
    """conductor-python 2.0.0, as a Conductor user runs it: its own models and clients."""
    tag = uuid.uuid4().hex[:10]
    with stack() as (_env, server):
        clients = OrkesClients(Configuration(server_api_url=server.url + "/api"))
        metadata, workflows = clients.get_metadata_client(), clients.get_workflow_client()
        metadata.register_task_def(
            TaskDef(name="sdk.step", retry_count=0, timeout_seconds=60, response_timeout_seconds=30)
        )
        step = WorkflowTask(
            name="sdk.step",
            task_reference_name="step",
            type="SIMPLE",
            input_parameters={"n": "${workflow.input.n}"},
        )
        wait = WorkflowTask(name="gate", task_reference_name="gate", type="WAIT")
        for name, tasks in (("sdk.flow", [step]), ("sdk.gate", [wait, step])):
            metadata.register_workflow_def(
                WorkflowDef(
                    name=name,
                    version=1,
                    tasks=tasks,
                    schema_version=2,
                    timeout_seconds=600,
                    timeout_policy="TIME_OUT_WF",
                ),
                overwrite=True,
            )
        got_def = metadata.get_workflow_def("sdk.flow", version=1)
        print(
            "SDK get_workflow_def:",
            got_def.name,
            got_def.version,
            [t.task_reference_name for t in got_def.tasks],
        )
        assert got_def.tasks[0].task_reference_name == "step"
        print("SDK get_task_def:", metadata.get_task_def("sdk.step"))

        flow_id = workflows.start_workflow(
            StartWorkflowRequest(
                name="sdk.flow", version=1, input={"n": 1}, correlation_id=f"sdk-{tag}"
            )
        )
        by_name = workflows.start_workflow_by_name(
            "sdk.flow", {"n": 2}, version=1, correlationId=f"sdk-{tag}"
        )
        gate_id = workflows.start_workflow_by_name("sdk.gate", {"n": 3})
        print("SDK start_workflow ->", repr(flow_id), repr(by_name), repr(gate_id))
        assert isinstance(flow_id, str) and len(flow_id) == 36

        def status(workflow_id: str) -> str | None:
            try:
                return str(workflows.get_workflow(workflow_id, include_tasks=True).status)
            except ApiException:
                return None  # not in the read model yet: 404

        def reached(workflow_id: str, want: str) -> None:
            wait_until(lambda: status(workflow_id) == want, 60, f"{workflow_id} {want}")

        for wf, want in ((flow_id, "COMPLETED"), (by_name, "COMPLETED"), (gate_id, "RUNNING")):
            reached(wf, want)
        done = workflows.get_workflow(flow_id, include_tasks=True)
        print(
            "SDK get_workflow:",
            done.workflow_id,
            done.workflow_name,
            done.status,
            done.correlation_id,
            [(t.reference_task_name, t.status, t.output_data) for t in done.tasks],
        )
        assert done.tasks[0].output_data == {"done": "step"}

        def hits() -> set[str]:
            found = workflows.search(start=0, size=10, query=f"correlationId = sdk-{tag}")
            return {r.workflow_id for r in found.results}

        wait_until(lambda: hits() == {flow_id, by_name}, 60, "both SDK workflows in search")
        page = workflows.search(
            start=0,
            size=10,
            free_text="*",
            query=f"correlationId = sdk-{tag} AND status = COMPLETED",
        )
        # 2.0.0 reads the answer as Orkes' ScrollableSearchResult (results, queryId): it
        # ignores Conductor's totalHits, which the API still sends.
        print(
            "SDK search:",
            [(r.workflow_id, r.workflow_type, r.status, r.start_time) for r in page.results],
        )
        assert {r.workflow_id for r in page.results} == {flow_id, by_name}

        workflows.terminate_workflow(gate_id, reason="sdk test")
        reached(gate_id, "TERMINATED")
        ended = workflows.get_workflow(gate_id, include_tasks=True)
        print("SDK after terminate:", ended.status, ended.reason_for_incompletion)
        with pytest.raises(ApiException) as missing:
            workflows.get_workflow(f"nope-{tag}")
        print("SDK on a missing workflow:", missing.value.status, missing.value.body)
        assert missing.value.status == 404
