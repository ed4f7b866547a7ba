"""A deployment knows itself (ADR 61, ADR 63), on the real broker, database and search engine:

- every role of ``es-sched run``, the API and a worker publish a liveness record that
  ``/api/v1/system`` shows alive, with its host, pid, partitions and lag;
- the decider killed with SIGKILL turns stale on ``/api/v1/system`` and on the System page (in
  Debian's chromium), and restarted under the same instance it takes over at once and is alive;
- a second decider on the live instance id is refused, naming the holder's host and pid;
  ``--replace`` takes the instance over and the holder stops;
- a worker of another deployment on the same topic prefix never runs this deployment's task:
  the dispatcher leaves it out of its fleet, and an assignment of this deployment sent to it
  anyway goes to the dead letters. The sentinel: a worker of this deployment started afterwards
  completes the task, and the other's handler has never run. A worker process of another
  deployment is refused at start.

One running system serves the whole module (the tests run in order, each leaving a live
decider behind). The liveness interval is 1 s, so a record is stale after 3 s of silence.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from es_sched.kafka.clients import producer
from es_sched.kafka.dead_letters import header_map
from es_sched.serialization import wire
from es_sched.settings import SystemSettings
from es_sched.workers import TaskContext, Worker
from testkit import ROOT
from testkit.api import Api, api
from testkit.kafka import read_to_end
from testkit.runtime import Env, Role, final_status, read_events
from testkit.settings import kafka_connection
from testkit.wait import wait_until

pytestmark = [pytest.mark.integration]
ARTIFACTS = ROOT / "tests" / "artifacts" / "console"
DOCS = ROOT / "docs" / "console"
FAST = {"ES_SCHED_SYSTEM_LIVENESS_INTERVAL_S": "1", "ES_SCHED_SYSTEM_STALE_AFTER_INTERVALS": "3"}
OTHERS = ["timers", "retry", "dispatcher", "projector-pg", "projector-search"]
DEFINITION = {
    "name": "system.guarded",
    "version": 1,
    "schemaVersion": 2,
    "ownerEmail": "t@example.com",
    "tasks": [{"name": "sys.guarded", "taskReferenceName": "guarded", "type": "SIMPLE"}],
}
TASKDEFS = [{"name": "sys.guarded", "retryCount": 0, "responseTimeoutSeconds": 600}]
HOST = socket.gethostname()


@dataclass
class System:
    env: Env
    stack: Api
    decider: Role
    others: Role
    worker: Role
    spare: list[Role] = field(default_factory=list)  # every other process started, to stop

    def processes(self) -> list[dict[str, Any]]:
        answer = self.stack.http.get("/api/v1/system")
        assert answer.status_code == 200, answer.text
        found: list[dict[str, Any]] = answer.json()["processes"]
        return found

    def role(self, name: str) -> dict[str, Any] | None:
        return next((p for p in self.processes() if p["role"] == name), None)

    def decider_is(self, pid: int, health: str) -> bool:
        p = self.role("decider")
        return p is not None and p["pid"] == pid and p["health"] == health

    def start(self, name: str, argv: list[str], **extra: str) -> Role:
        role = Role(self.env, name, argv, **extra)
        self.spare.append(role)
        return role


@pytest.fixture(scope="module")
def system() -> Iterator[System]:
    env = Env(extra=dict(FAST))
    env.create()
    env.push(DEFINITION, TASKDEFS)
    decider = Role(env, "decider")
    others = Role(env, "others", ["run", *[a for r in OTHERS for a in ("--role", r)]])
    worker = Role(env, "worker", ["worker", "--noop", "--types", "sys.step", "--worker-id", "wa"])
    try:
        for r in (decider, others, worker):
            r.wait_log("started", 90)
        with api(env) as stack:
            s = System(env, stack, decider, others, worker)
            try:
                yield s
            finally:
                for r in s.spare:
                    r.stop()
                s.decider.stop()
    finally:
        for r in (worker, others, decider):
            r.stop()


def test_every_role_process_publishes_its_liveness_record(system: System) -> None:
    wanted = {"decider", *OTHERS, "api", "worker"}

    def alive() -> dict[str, dict[str, Any]]:
        return {p["role"]: p for p in system.processes() if p["health"] == "alive"}

    wait_until(
        lambda: wanted <= set(alive()) and alive()["decider"]["partitions"],
        60,
        lambda: f"an alive record of each of {sorted(wanted)}: {system.processes()}",
    )
    found = alive()
    assert found["decider"]["pid"] == system.decider.proc.pid
    assert {found[r]["pid"] for r in OTHERS} == {system.others.proc.pid}
    assert found["api"]["pid"] == system.stack.role.proc.pid
    assert found["worker"]["pid"] == system.worker.proc.pid and found["worker"]["instance"] == "wa"
    # The dispatcher is a static member under its instance (ADR 79); shared roles are keyed by
    # their process: any number of projectors may run instance 0.
    assert found["dispatcher"]["instance"] == "0"
    assert found["projector-pg"]["instance"] == f"0@{HOST}-{system.others.proc.pid}"
    assert all(p["host"] == HOST and p["version"] for p in found.values())
    assert len({p["deployment"] for p in found.values()}) == 1
    # The decider holds every partition of its input topics and says how far behind it is.
    prefix = system.env.prefix
    assert f"{prefix}.commands[0]" in found["decider"]["partitions"]
    assert isinstance(found["decider"]["lag"], int)
    assert found["api"]["lag"] is None


@pytest.mark.browser
def test_a_killed_decider_shows_stale_then_alive_after_its_restart(
    system: System, chromium: Any
) -> None:
    from playwright.sync_api import expect  # noqa: PLC0415 - only when the fixture did not skip

    expect.set_options(timeout=60_000)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    DOCS.mkdir(parents=True, exist_ok=True)
    old = system.decider.proc.pid
    wait_until(lambda: system.decider_is(old, "alive"), 60, "the decider alive")
    system.decider.kill()
    wait_until(
        lambda: system.decider_is(old, "stale"),
        60,
        lambda: f"the killed decider shown stale: {system.role('decider')}",
    )
    page = chromium.new_page(viewport={"width": 1500, "height": 800})
    page.goto(f"{system.stack.url}/ui/system")
    row = page.locator('tr[data-role="decider"]')
    expect(row).to_have_attribute("data-health", "stale")
    expect(row).to_contain_text(str(old))
    expect(page.locator("#stale-notice")).to_contain_text("1 role process stale")
    page.screenshot(path=str(ARTIFACTS / "system-stale.png"), full_page=True)
    (DOCS / "system-stale.png").write_bytes((ARTIFACTS / "system-stale.png").read_bytes())

    # Restarted under the same instance on the same host: the holder's pid is gone, so it
    # takes over at once (no waiting for the record to go stale, no --replace).
    system.decider = Role(system.env, "decider")
    system.decider.wait_log("role decider started", 60)
    assert "is no longer running" in system.decider.text()
    new = system.decider.proc.pid
    wait_until(lambda: system.decider_is(new, "alive"), 60, "the restarted decider alive")
    # The page refreshes itself: the same page, not reloaded, shows it alive.
    expect(row).to_have_attribute("data-health", "alive")
    expect(row).to_contain_text(str(new))
    expect(page.locator("#stale-notice")).to_have_count(0)
    page.screenshot(path=str(ARTIFACTS / "system-alive.png"), full_page=True)
    page.close()


def _flat(text: str) -> str:
    return " ".join(text.split())  # the CLI wraps its error message


def test_a_second_decider_is_refused_and_replace_takes_the_instance_over(system: System) -> None:
    holder = system.decider
    holder.wait_log("role decider started", 60)
    wait_until(lambda: system.decider_is(holder.proc.pid, "alive"), 60, "the decider alive")
    second = system.start("decider-second", ["run", "--role", "decider"])
    assert second.proc.wait(60) != 0
    refusal = _flat(second.text())
    assert f"is held by pid {holder.proc.pid} on host {HOST}" in refusal, refusal
    assert "--replace" in refusal
    assert holder.proc.poll() is None, "the refused process disturbed the holder"

    replacing = system.start("decider-replace", ["run", "--role", "decider", "--replace"])
    replacing.wait_log("role decider started", 60)
    assert holder.proc.wait(60) != 0  # taken over: it stops
    assert "taken over on purpose" in replacing.text()
    system.decider = replacing
    wait_until(
        lambda: system.decider_is(replacing.proc.pid, "alive"),
        60,
        lambda: f"the replacing decider alive: {system.role('decider')}",
    )


def test_a_worker_of_another_deployment_never_runs_this_deployments_task(system: System) -> None:
    env = system.env
    ran: list[str] = []
    other = replace(env.settings, system=SystemSettings(deployment="deployment-b"))
    intruder = Worker(worker_id="wb", settings=other, concurrency=1, heartbeat_s=1.0)

    @intruder.task("sys.guarded")
    def handle(_ctx: TaskContext, task_input: dict[str, Any]) -> dict[str, Any]:
        ran.append(str(task_input))
        return {"by": "b"}

    stop = threading.Event()
    thread = threading.Thread(target=intruder.run, args=(stop,), daemon=True)
    thread.start()
    try:
        assert intruder.ready.wait(60), "the other deployment's worker did not start"
        system.others.wait_log("worker wb belongs to deployment 'deployment-b'", 60)
        [started] = env.submit("system.guarded", [{"case": "guarded"}])

        # Even an assignment of this deployment sent to it is refused: a dead letter says why.
        deployment = env.settings.system.deployment_id
        stray = wire.Assignment(
            "wb",
            "wf-stray",
            "task-stray",
            "sys.guarded",
            1,
            1,
            "tok",
            _in(60),
            {},
            None,
            deployment=deployment,
        )
        p = producer(kafka_connection(env.bootstrap))
        p.produce(env.topics.assignments, wire.encode(stray), b"wb")
        assert p.flush(30) == 0
        wait_until(
            lambda: bool(_dead_letters(env, "DeploymentMismatch")),
            60,
            "the stray assignment in the dead letters",
        )
        [reason] = _dead_letters(env, "DeploymentMismatch")
        assert f"from deployment '{deployment}'" in reason and "'deployment-b'" in reason

        # The sentinel: a worker of this deployment completes the task the other never got.
        mine = system.start(
            "worker-guarded",
            ["worker", "--noop", "--types", "sys.guarded", "--worker-id", "wg"],
        )
        mine.wait_log("started", 60)
        wait_until(
            lambda: final_status(read_events(env).get(started.workflow_id, [])) == "COMPLETED",
            120,
            "the guarded workflow completed by this deployment's worker",
        )
        assert ran == [], "the other deployment's worker ran a task of this one"
    finally:
        stop.set()
        thread.join(60)

    # A worker process of the other deployment is refused at start, naming who uses the prefix.
    refused = system.start(
        "worker-b",
        ["worker", "--noop", "--types", "sys.guarded"],
        ES_SCHED_SYSTEM_DEPLOYMENT="deployment-b",
    )
    assert refused.proc.wait(60) != 0
    text = _flat(refused.text())
    assert f"is in use by deployment '{deployment}'" in text, text


def _in(seconds: float) -> str:
    return (datetime.now(UTC) + timedelta(seconds=seconds)).isoformat()


def _dead_letters(env: Env, error_class: str) -> list[str]:
    found = []
    for msg in read_to_end(env.topics.dead_letters, "read_uncommitted", 30):
        headers = header_map(msg)
        if headers.get("error.class") == error_class:
            found.append(headers.get("error.reason", ""))
    return found
