from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from es_sched.settings import Settings
from es_sched.stack import probes
from testkit import role_logs
from testkit.browser import ARGS, chromium_path
from testkit.kafka import delete_new_topics  # noqa: F401 - autouse fixture
from testkit.settings import kafka_connection, unique_name
from tests.integration.backends import NO_DOCKER, Backend, engine_available, local, testcontainers
from tests.integration.worker_harness import Dispatcher


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failed test's report shows what the role processes it started logged
    (``testkit.role_logs``); after its teardown, its logs are forgotten."""
    outcome = yield
    report: pytest.TestReport = outcome.get_result()  # type: ignore[attr-defined]
    if report.failed:
        for log in role_logs.take():
            report.sections.append((f"role log {log.name}", role_logs.notable(log)))
    elif report.when == "teardown":
        role_logs.take()


@pytest.fixture(scope="session", params=["local", "testcontainers"])
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    if request.param == "local":
        b = local()
        down = [
            name
            for name, probe in (
                ("kafka", probes.kafka(kafka_connection(b.kafka_bootstrap))),
                ("search", probes.search(b.search_url)),
            )
            if not probe.healthy
        ]
        if down:
            pytest.fail(f"local stack not healthy ({', '.join(down)}): run `es-sched stack up`")
        yield b
    else:
        if not engine_available():
            pytest.skip(NO_DOCKER)
        with testcontainers() as b:
            yield b


@pytest.fixture
def unique() -> str:
    """A name no other test uses: each test gets its own topic, schema or index."""
    return unique_name()


@pytest.fixture
def dispatcher(settings: Settings) -> Iterator[Dispatcher]:
    """The test playing the dispatcher for a worker (``worker_harness``), on the module's
    ``settings``."""
    d = Dispatcher(settings)
    yield d
    d.close()


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    """Debian's chromium through Playwright, one per browser test module (never downloaded:
    ``testkit.browser``); skips saying why when there is none."""
    path, why = chromium_path()
    if path is None:
        pytest.skip(f"no chromium to drive: {why}")
    sync = pytest.importorskip("playwright.sync_api", reason="the playwright package is missing")
    with sync.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(path), args=ARGS)
        try:
            yield browser
        finally:
            browser.close()
