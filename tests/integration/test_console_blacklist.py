"""A blacklisted worker in a real browser (Debian's chromium through Playwright, ADR 58): the
workers page shows it with why (its failures) and until when, the queues page says why its
pool's queue waits, and an operator lifts it with the console's button, after which the
waiting task runs on that worker.

The system is ``blacklist_harness``'s (SDK worker in pool ``media``, decider, dispatcher,
Postgres projector, API with auth off: an admin, so the Lift button shows). Screenshots go
under ``tests/artifacts/console/`` (gitignored; ``docs/console/`` holds a copy).
"""

from __future__ import annotations

from typing import Any

import pytest

from es_sched.workers import Worker
from testkit import ROOT
from testkit.api import Api
from testkit.runtime import Env, roles
from testkit.wait import wait_until
from tests.integration.blacklist_harness import (  # noqa: F401 - fixtures
    TYPE,
    WORKER_ID,
    ended,
    env_fixture,
    run,
    stack_fixture,
    worker_fixture,
)

pytestmark = [pytest.mark.integration, pytest.mark.browser]
ARTIFACTS = ROOT / "tests" / "artifacts" / "console"
TIMEOUT_MS = 60_000


def test_a_blacklisted_worker_and_why_then_lifted_from_the_console(
    chromium: Any, env: Env, stack: Api, worker: Worker
) -> None:
    from playwright.sync_api import expect  # noqa: PLC0415 - only when the fixture did not skip

    expect.set_options(timeout=TIMEOUT_MS)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with roles(env, "decider", "dispatcher", "projector-pg"):
        ended(env, run(env, "bad", 2), "FAILED")  # the input's fault: not counted
        ended(env, run(env, "host", 3), "FAILED")  # 3 of 3 outcomes the worker's own faults
        wait_until(
            lambda: stack.http.get("/api/v1/workers").json()["workers"][0]["blacklisted"],
            30,
            "the worker blacklisted",
        )
        waiting = run(env, "ok")

        page = chromium.new_page(viewport={"width": 1400, "height": 700})
        page.set_default_timeout(TIMEOUT_MS)
        page.goto(f"{stack.url}/ui/workers")
        row = page.locator(f"#blacklist-{WORKER_ID}")
        expect(row).to_contain_text("Blacklisted until")
        expect(row).to_contain_text("3 of 3 failed")
        expect(row.locator("ul.failures li")).to_have_count(3)
        expect(row.locator("ul.failures li").first).to_contain_text("host fault")
        expect(row.locator("ul.failures li").first).to_contain_text("not writable")
        page.screenshot(path=str(ARTIFACTS / "workers-blacklisted.png"), full_page=True)

        def queue_cell() -> str:
            page.goto(f"{stack.url}/ui/queues")
            found = page.locator("table.grid tbody tr", has_text=TYPE)
            return found.locator("span.unplaceable").inner_text() if found.count() else ""

        wait_until(lambda: "blacklisted until" in queue_cell(), 60, queue_cell)
        assert queue_cell().startswith("pool media: 1 worker, blacklisted until ")
        assert queue_cell().endswith(": 3 of 3 failed")
        page.screenshot(path=str(ARTIFACTS / "queues-unplaceable.png"), full_page=True)

        page.goto(f"{stack.url}/ui/workers")
        page.locator(f"#blacklist-{WORKER_ID}").get_by_role("button", name="Lift").click()
        expect(page.locator(f"#blacklist-{WORKER_ID}")).to_have_count(0)
        expect(page.locator("table#workers tbody")).not_to_contain_text("blacklisted")
        ended(env, waiting, "COMPLETED")  # the waiting task ran on the lifted worker
        page.goto(f"{stack.url}/ui/workers")
        page.screenshot(path=str(ARTIFACTS / "workers-lifted.png"), full_page=True)
        page.close()
