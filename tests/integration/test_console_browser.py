"""The console in a real browser (Debian's chromium through Playwright) on a live stack: the
list, a status filter, a workflow's DAG, a retry of the failed one seen taking effect, and the
queues page showing a backlog once no worker runs.

The stack is the real one: ``es-sched api`` plus the decider, dispatcher and both projectors as
child processes on this test's private topics; the harness ``Worker`` fails one workflow's
``check`` task (retryCount 0, so the workflow fails) and completes every other task, and the
retry's new attempt too. The test waits on facts (an HTTP answer, the page's content) and saves
screenshots under ``tests/artifacts/console/`` (gitignored; ``docs/console/`` holds a copy).
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from testkit import ROOT
from testkit.api import Api, api
from testkit.runtime import Env, Worker, roles
from testkit.wait import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.browser]
ARTIFACTS = ROOT / "tests" / "artifacts" / "console"
TIMEOUT_MS = 90_000


def step(ref: str) -> dict[str, Any]:
    return {"name": "console.step", "taskReferenceName": ref, "type": "SIMPLE"}


DEFINITION = {
    "name": "console.review",
    "version": 1,
    "schemaVersion": 2,
    "ownerEmail": "t@example.com",
    "tasks": [
        step("fetch"),
        {
            "name": "route",
            "taskReferenceName": "route",
            "type": "SWITCH",
            "evaluatorType": "value-param",
            "expression": "kind",
            "inputParameters": {"kind": "${workflow.input.kind}"},
            "decisionCases": {"video": [step("transcode")], "image": [step("resize")]},
            "defaultCase": [step("skip")],
        },
        {
            "name": "fan",
            "taskReferenceName": "fan",
            "type": "FORK_JOIN",
            "forkTasks": [[step("thumbs")], [step("check")]],
        },
        {
            "name": "join",
            "taskReferenceName": "join",
            "type": "JOIN",
            "joinOn": ["thumbs", "check"],
        },
        step("publish"),
    ],
}
TASKDEFS = [{"name": "console.step", "retryCount": 0, "responseTimeoutSeconds": 600}]


class FailOnce:
    """Fails ``check`` of one workflow once (terminally: no retries left); completes the rest."""

    def __init__(self) -> None:
        self.victim = ""
        self.failed = threading.Event()

    def __call__(self, task: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        if (
            task["workflow_id"] == self.victim
            and task["ref"] == "check"
            and not self.failed.is_set()
        ):
            self.failed.set()
            return "FAILED", {}
        return "COMPLETED", {"ok": task["ref"], "logs": [f"{task['ref']} done"]}


def _statuses(stack: Api, ids: list[str]) -> dict[str, str]:
    found = {}
    for wid in ids:
        answer = stack.http.get(f"/ui/workflows/{wid}/live")
        if answer.status_code == 200:
            found[wid] = answer.text.split('data-status="', 1)[1].split('"', 1)[0]
    return found


def test_list_filter_dag_and_retry_in_a_browser(chromium: Any) -> None:
    from playwright.sync_api import expect  # noqa: PLC0415 - only when the fixture did not skip

    expect.set_options(timeout=TIMEOUT_MS)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    env = Env()
    env.create()
    env.push(DEFINITION, TASKDEFS)
    policy = FailOnce()
    with (
        roles(env, "decider", "dispatcher", "projector-pg", "projector-search"),
        api(env) as stack,
    ):
        submitted = env.submit(
            "console.review", [{"kind": "video"}, {"kind": "image"}, {"kind": "audio"}]
        )
        ids = [s.workflow_id for s in submitted]
        policy.victim = ids[0]
        with Worker(env, policy):
            want = {ids[0]: "FAILED", ids[1]: "COMPLETED", ids[2]: "COMPLETED"}
            wait_until(
                lambda: _statuses(stack, ids) == want,
                120,
                lambda: f"the read model to show {want}: {_statuses(stack, ids)}",
            )

            page = chromium.new_page(viewport={"width": 1400, "height": 900})
            page.set_default_timeout(TIMEOUT_MS)
            # The list: every workflow, its counts per status, what the rows reflect.
            page.goto(f"{stack.url}/ui/?name=console.review")
            expect(page.locator("table.workflows tbody tr")).to_have_count(3)
            expect(page.locator("#reflects")).to_contain_text("offsets")
            expect(page.locator('a.count[data-status="FAILED"] b')).to_have_text("1")
            page.screenshot(path=str(ARTIFACTS / "list.png"), full_page=True)

            # Filter by status through the count link: the URL carries the filter.
            page.locator('a.count[data-status="FAILED"]').click()
            expect(page.locator("table.workflows tbody tr")).to_have_count(1)
            assert "status=FAILED" in page.url
            expect(page.locator("table.workflows tbody tr").first).to_have_attribute(
                "data-status", "FAILED"
            )
            page.screenshot(path=str(ARTIFACTS / "list-failed.png"), full_page=True)
            # A bulk action on everything the filter matches asks first, with the count.
            page.locator('form#bulk select[name="action"]').select_option("terminate")
            page.get_by_role("button", name="…all 1 matching the filter").click()
            expect(page.locator("#confirm-box .bulk-count")).to_have_text("1")
            page.get_by_role("button", name="No").click()
            expect(page.locator("#confirm-box")).to_have_count(0)

            # Its page: the DAG with each task's state, the switch's taken branch.
            page.locator(f'a[href="/ui/workflows/{ids[0]}"]').click()
            dag = page.locator("svg#dag")
            expect(dag.locator('g.node.state-FAILED[data-ref="check"]')).to_have_count(1)
            expect(dag.locator('g.node.state-COMPLETED[data-ref="thumbs"]')).to_have_count(1)
            expect(dag.locator('g.node.state-NOT_STARTED[data-ref="publish"]')).to_have_count(1)
            expect(dag.locator('polyline.edge.taken[data-target="transcode"]')).to_have_count(1)
            expect(dag.locator('g.node.skipped[data-ref="resize"]')).to_have_count(1)
            # The side panel of the failed task, and the failed-only history.
            dag.locator('g.node[data-ref="check"]').click()
            expect(page.locator("#panel")).to_contain_text("scripted failure of check")
            page.get_by_text("failed only").click()
            expect(page.locator('#history table[data-failed="yes"]')).to_contain_text("task.failed")
            page.screenshot(path=str(ARTIFACTS / "workflow-failed.png"), full_page=True)

            # Retry it and see the page change on its own as the decider's events arrive.
            page.get_by_role("button", name="Retry").click()
            expect(page.locator("#action-result")).to_contain_text("Retry sent")
            expect(page.locator("#wf-status")).to_have_text("COMPLETED")
            expect(dag.locator('g.node.state-COMPLETED[data-ref="publish"]')).to_have_count(1)
            expect(dag.locator('g.node[data-ref="check"]')).to_have_attribute(
                "data-state", "COMPLETED"
            )
            dag.locator('g.node[data-ref="check"]').click()
            expect(page.locator("#panel details.attempt")).to_have_count(2)
            page.get_by_text("all", exact=True).click()
            expect(page.locator('#history table[data-failed="no"]')).to_contain_text(
                "workflow.retried"
            )
            page.screenshot(path=str(ARTIFACTS / "workflow.png"), full_page=True)

            page.goto(f"{stack.url}/ui/?name=console.review")
            expect(page.locator('a.count[data-status="COMPLETED"] b')).to_have_text("3")
            page.screenshot(path=str(ARTIFACTS / "list-after-retry.png"), full_page=True)
            page.close()

        # No worker now: new workflows' first tasks wait, and the queues page shows the backlog
        # (per type and priority, with the oldest age) once the read model has them.
        waiting = env.submit("console.review", [{"kind": "video"}, {"kind": "image"}])
        wait_until(
            lambda: all(_statuses(stack, [w.workflow_id]) for w in waiting),
            60,
            "the waiting workflows in the read model",
        )
        page = chromium.new_page(viewport={"width": 1400, "height": 600})
        page.set_default_timeout(TIMEOUT_MS)

        def backlog() -> list[str]:
            page.goto(f"{stack.url}/ui/queues")
            row = page.locator("table.grid tbody tr", has_text="console.step")
            return row.locator("td").all_inner_texts() if row.count() else []

        # queued + leased-not-started: the departed worker may still be offered one
        wait_until(
            lambda: len(cells := backlog()) == 7 and int(cells[2]) + int(cells[3]) == 2,
            60,
            lambda: f"two waiting console.step tasks on the queues page: {backlog()}",
        )
        # The scripted worker sends no status: the page says no worker can take them (ADR 58).
        assert "pool default: no worker serves console.step" in backlog()[6]
        page.screenshot(path=str(ARTIFACTS / "queues.png"), full_page=True)
        page.close()
