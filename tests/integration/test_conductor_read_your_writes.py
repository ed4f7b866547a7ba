"""Read-your-writes through the real conductor-python SDK (ADR 56): back to back in one
thread, each write's effect is visible to the very next call, while other clients keep the
decider and the projector busy.

One running system (``es-sched api``, the decider and the PostgreSQL projector on private
topics) is shared by the module's tests: they only submit and check. The load is
``LOAD_CLIENTS`` threads starting WAIT workflows through the API back to back for as long as
the module runs (each start waits for its own effect, so the load is as busy as the system
lets it be and leaves no backlog: a producer that never waits would pile up more than any
decider answers within the bounded wait, and every write would rightly answer 503). Nothing
here waits on time: every check is the next SDK call, and a failure is counted with what the
API answered.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import httpx
import pytest
from conductor.client.configuration.configuration import Configuration
from conductor.client.http.models import StartWorkflowRequest, WorkflowDef, WorkflowTask
from conductor.client.http.rest import ApiException
from conductor.client.orkes_clients import OrkesClients

from testkit.api import Api, api
from testkit.runtime import Env, roles
from testkit.wait import wait_until

pytestmark = pytest.mark.integration

TIMES = 100  # each sequence, back to back (issue 50's figure)
LOAD_CLIENTS = 2  # other clients starting workflows back to back meanwhile
GATE = {
    "name": "rw.gate",
    "version": 1,
    "schemaVersion": 2,
    "tasks": [{"name": "gate", "taskReferenceName": "gate", "type": "WAIT"}],
}


@dataclass
class Load:
    """Other clients' workflows, started through the API until ``stop`` is set: each start
    waits for its own effect, so the load keeps the decider and the projector busy without
    piling up a backlog that would outlast the module."""

    url: str
    stop: threading.Event = field(default_factory=threading.Event)
    submitted: int = 0
    error: BaseException | None = None

    def run(self) -> None:
        try:
            with httpx.Client(base_url=self.url, timeout=60) as http:
                while not self.stop.is_set():
                    one = {"name": "rw.gate", "input": {"load": self.submitted}}
                    http.post("/api/workflow", json=one).raise_for_status()
                    self.submitted += 1
        except BaseException as exc:  # noqa: BLE001 - reported by the fixture that reads it
            self.error = exc


@dataclass
class System:
    env: Env
    server: Api
    loads: list[Load]

    def load_submitted(self) -> int:
        return sum(x.submitted for x in self.loads)

    def sdk(self) -> OrkesClients:
        return OrkesClients(Configuration(server_api_url=self.server.url + "/api"))


@pytest.fixture(scope="module")
def system() -> Iterator[System]:
    env = Env()
    env.create()
    env.push(GATE, [])
    with roles(env, "decider", "projector-pg"), api(env) as server:
        loads = [Load(server.url) for _ in range(LOAD_CLIENTS)]
        threads = [threading.Thread(target=x.run, name="rw-load", daemon=True) for x in loads]
        for thread in threads:
            thread.start()
        # The load is on before any test counts: its first workflows are in the read model.
        wait_until(
            lambda: all(x.submitted >= 5 or x.error is not None for x in loads),
            120,
            "load",
        )
        try:
            yield System(env, server, loads)
        finally:
            for x in loads:
                x.stop.set()
            for thread in threads:
                thread.join(60)
        failed = [x.error for x in loads if x.error is not None]
        assert failed == [], f"a load client failed: {failed!r}"


def back_to_back(name: str, step: Callable[[int], str | None]) -> None:
    """Run ``step`` TIMES; each answers None or what went wrong. Prints the count."""
    failures: list[str] = []
    for i in range(TIMES):
        try:
            problem = step(i)
        except ApiException as exc:
            problem = f"HTTP {exc.status}: {exc.body!r}"
        if problem is not None:
            failures.append(f"#{i}: {problem}")
    print(f"{name}: {TIMES - len(failures)} of {TIMES} back to back, {len(failures)} failures")
    assert failures == [], f"{name}: {len(failures)} of {TIMES} failed: {failures[:5]}"


def test_start_then_terminate(system: System) -> None:
    workflows = system.sdk().get_workflow_client()
    before = system.load_submitted()

    def step(i: int) -> str | None:
        wf = workflows.start_workflow_by_name("rw.gate", {"i": i})
        workflows.terminate_workflow(wf, reason="read-your-writes test")
        status = str(workflows.get_workflow(wf, include_tasks=False).status)
        return None if status == "TERMINATED" else f"{wf} is {status} after its terminate"

    back_to_back("start->terminate", step)
    assert system.load_submitted() > before  # the load ran meanwhile


def test_start_then_get(system: System) -> None:
    workflows = system.sdk().get_workflow_client()
    tag = uuid.uuid4().hex[:8]

    def step(i: int) -> str | None:
        wf = workflows.start_workflow(
            StartWorkflowRequest(name="rw.gate", input={"i": i}, correlation_id=f"{tag}-{i}")
        )
        got = workflows.get_workflow(wf, include_tasks=True)
        if got.workflow_id != wf or got.correlation_id != f"{tag}-{i}":
            return f"get answered {got.workflow_id} / {got.correlation_id} for {wf}"
        return None

    back_to_back("start->get", step)


def test_register_then_start(system: System) -> None:
    clients = system.sdk()
    metadata, workflows = clients.get_metadata_client(), clients.get_workflow_client()
    name = f"rw.reg.{uuid.uuid4().hex[:8]}"
    wait = WorkflowTask(name="gate", task_reference_name="gate", type="WAIT")

    def step(i: int) -> str | None:
        version = i + 1  # a new version each time: the start must see this very push
        metadata.register_workflow_def(
            WorkflowDef(name=name, version=version, tasks=[wait], schema_version=2),
            overwrite=True,
        )
        wf = workflows.start_workflow(StartWorkflowRequest(name=name, version=version))
        got = workflows.get_workflow(wf, include_tasks=False)
        if got.workflow_version != version:
            return f"{wf} runs version {got.workflow_version}, not {version}"
        return None

    back_to_back("register->start", step)


def test_refusals_come_back_as_errors_with_the_deciders_reason(system: System) -> None:
    workflows = system.sdk().get_workflow_client()
    missing = f"rw-missing-{uuid.uuid4().hex[:8]}"
    with pytest.raises(ApiException) as gone:
        workflows.terminate_workflow(missing, reason="nothing there")
    assert gone.value.status == 404
    assert f"unknown workflow '{missing}'" in str(gone.value.body)  # the decider said so
    with pytest.raises(ApiException) as unknown:
        workflows.start_workflow_by_name(f"rw.none.{missing}", {})
    assert unknown.value.status == 404
    assert "POST /api/metadata/workflow" in str(unknown.value.body)
    assert "es-sched defs push" not in str(unknown.value.body)
