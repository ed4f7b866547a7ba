"""Smart retry and the review queue on the real stack (ADR 71): a transcode that always fails
retries with the input its policy changes per attempt, parks for review after its last attempt
while its workflow keeps running, and an operator decides through the native API (a retry with
edited input, which completes) and through the console in a real browser (a fail).

One running system for the module: the decider, the PostgreSQL projector and ``es-sched api``
on private topics; the harness ``Worker`` plays dispatcher and worker and fails ``encode``
unless its input says ``"fixed": true``, as a broken encoder setting would until an operator
fixes it. The browser test saves the console's review page under ``tests/artifacts/console/``
(gitignored; ``docs/console/review-queue.png`` holds a copy).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from testkit import ROOT
from testkit.api import Api, api
from testkit.runtime import Env, Worker, roles
from testkit.wait import wait_until

pytestmark = pytest.mark.integration
ARTIFACTS = ROOT / "tests" / "artifacts" / "console"
TIMEOUT_MS = 60_000

CHANGES = [{"preset": "veryfast"}, {"codec": "h264", "height": 480}]
DEFINITION = {
    "name": "review.transcode",
    "version": 1,
    "tasks": [
        {
            "name": "review.encode",
            "taskReferenceName": "encode",
            "type": "SIMPLE",
            "inputParameters": {
                "source": "${workflow.input.source}",
                "height": 720,
                "codec": "h265",
                "preset": "medium",
            },
        },
        {"name": "review.publish", "taskReferenceName": "publish", "type": "SIMPLE"},
    ],
}
TASKDEFS = [
    {
        "name": "review.encode",
        "retryCount": 2,
        "retryDelaySeconds": 0,
        "retryInputChanges": CHANGES,
        "onExhausted": "REVIEW",
    },
    {"name": "review.publish", "retryCount": 0},
]


def encoder(task: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    if task["ref"] == "encode" and not (task.get("input") or {}).get("fixed"):
        return "FAILED", {}
    return "COMPLETED", {"ok": task["ref"]}


@pytest.fixture(scope="module")
def stack() -> Iterator[tuple[Env, Api]]:
    env = Env()
    env.create()
    env.push(DEFINITION, TASKDEFS)
    with roles(env, "decider", "projector-pg"), api(env) as running, Worker(env, encoder):
        yield env, running


def parked(stack: Api, workflow_id: str) -> dict[str, Any] | None:
    queue = stack.http.get("/api/v1/review").json()["tasks"]
    return next((p for p in queue if p["workflowId"] == workflow_id), None)


def wait_parked(stack: Api, workflow_id: str) -> dict[str, Any]:
    wait_until(lambda: parked(stack, workflow_id) is not None, 60, "the task in the review queue")
    found = parked(stack, workflow_id)
    assert found is not None
    return found


def test_a_failing_task_parks_with_changed_inputs_and_an_edited_retry_completes(
    stack: tuple[Env, Api],
) -> None:
    env, running = stack
    [started] = env.submit("review.transcode", [{"source": "file:///in.mp4"}])
    wid = started.workflow_id
    entry = wait_parked(running, wid)
    assert (entry["workflowStatus"], entry["task"]["status"]) == ("RUNNING", "PARKED_FOR_REVIEW")
    assert entry["task"]["attempt"] == 3 and "scripted failure of encode" in entry["task"]["reason"]

    # Each attempt ran with the input its retry policy decided (the read model's task rows).
    tasks = running.http.get(f"/api/v1/workflows/{wid}").json()["workflow"]["tasks"]
    encodes = sorted((t for t in tasks if t["ref"] == "encode"), key=lambda t: t["attempt"])
    base = {"source": "file:///in.mp4", "height": 720, "codec": "h265", "preset": "medium"}
    assert [t["input"] for t in encodes] == [
        base,
        {**base, "preset": "veryfast"},
        {**base, "preset": "veryfast", "codec": "h264", "height": 480},
    ]

    # Conductor's clients read it as a task still in progress (their SDKs know no other name).
    conductor = running.http.get(f"/api/workflow/{wid}").json()
    last = [t for t in conductor["tasks"] if t["referenceTaskName"] == "encode"][-1]
    assert (conductor["status"], last["status"], last["retryCount"]) == (
        "RUNNING",
        "IN_PROGRESS",
        2,
    )

    # The operator retries with the input edited; the next read sees the new attempt.
    edited = {**encodes[-1]["input"], "fixed": True}
    body = {"decision": "retry", "input": edited, "reason": "fixed the encoder flags"}
    url = f"/api/v1/workflows/{wid}/tasks/{entry['task']['taskId']}/review"
    answer = running.http.post(url, json=body)
    assert answer.status_code == 200, answer.text
    after = answer.json()["token"]
    read = running.http.get(f"/api/v1/workflows/{wid}", params={"after": after}).json()
    fourth = [t for t in read["workflow"]["tasks"] if t["ref"] == "encode" and t["attempt"] == 4]
    assert fourth and fourth[0]["input"] == edited
    assert parked(running, wid) is None

    # A second decision on the same parked attempt is the decider's refusal, with its reason
    # (which one depends on whether the retried workflow has completed meanwhile).
    again = running.http.post(url, json={"decision": "fail"})
    reason = again.json()["message"]
    assert again.status_code == 409 and "review of workflow" in reason, reason
    assert "is not awaiting review" in reason or "only while its workflow runs" in reason, reason

    def status() -> str:
        return str(running.http.get(f"/api/v1/workflows/{wid}").json()["workflow"]["status"])

    wait_until(lambda: status() == "COMPLETED", 60, "the workflow to complete after the retry")


@pytest.mark.browser
def test_the_console_lists_the_review_queue_and_fails_a_task(
    stack: tuple[Env, Api], chromium: Any
) -> None:
    from playwright.sync_api import expect  # noqa: PLC0415 - only when the fixture did not skip

    expect.set_options(timeout=TIMEOUT_MS)
    env, running = stack
    inputs = [{"source": f"file:///{n}.mp4"} for n in ("a", "b")]
    ids = [s.workflow_id for s in env.submit("review.transcode", inputs)]
    for wid in ids:
        wait_parked(running, wid)
    page = chromium.new_page(viewport={"width": 1400, "height": 900})
    page.set_default_timeout(TIMEOUT_MS)
    page.goto(f"{running.url}/ui/review")
    rows = page.locator("table.review tbody tr.parked")
    for wid in ids:
        expect(rows.filter(has_text=wid)).to_have_count(1)
    first = rows.filter(has_text=ids[0])
    expect(first).to_contain_text("PARKED_FOR_REVIEW")
    expect(first.locator("textarea[name=input]")).to_contain_text('"height": 480')
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "review-queue.png"), full_page=True)

    # Fail the first from its form: the page it lands on no longer lists it.
    first.locator("form.review-fail input[name=reason]").fill("source is corrupt")
    first.get_by_role("button", name="Fail").click()
    expect(page.locator("table.review tbody tr.parked").filter(has_text=ids[0])).to_have_count(0)
    expect(page.locator("table.review tbody tr.parked").filter(has_text=ids[1])).to_have_count(1)
    page.close()
    wf = running.http.get(f"/api/v1/workflows/{ids[0]}").json()["workflow"]
    assert wf["status"] == "FAILED" and "failed in review: source is corrupt" in wf["reason"]
