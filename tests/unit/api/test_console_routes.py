"""The console's workflows pages over fake read models (no stack): what they read, what they
render, what the actions send, and that bad input is a 4xx with a reason."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient

from es_sched.api import read_model_freshness
from es_sched.api.app import create_app
from es_sched.api.services import Lazy, Services
from es_sched.commands import Submitted
from es_sched.kafka.topics import topics_for
from es_sched.projections.postgres import queries
from es_sched.settings import ApiSettings, load_settings
from tests.unit.api.writes_support import fake_settler

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
DEFINITION = {
    "name": "wf",
    "version": 1,
    "tasks": [
        {"name": "a", "taskReferenceName": "a", "type": "SIMPLE"},
        {"name": "b", "taskReferenceName": "b", "type": "SIMPLE"},
    ],
}


def wf_row(wid: str, status: str = "FAILED") -> dict[str, Any]:
    reason = "task a failed" if status == "FAILED" else ""
    return {
        "workflow_id": wid,
        "name": "wf",
        "def_version": 1,
        "tenant": None,
        "priority": 4,
        "status": status,
        "ending": None,
        "reason": reason,
        "correlation_id": "c1",
        "parent_workflow_id": None,
        "input": {},
        "output": {},
        "created_at": T0,
        "updated_at": T0,
        "ended_at": T0,
        "version": 7,
    }


def task_row(ref: str, status: str, attempt: int = 1) -> dict[str, Any]:
    return {
        "task_id": f"{ref}-{attempt}",
        "workflow_id": "w1",
        "ref": ref,
        "name": ref,
        "task_type": "SIMPLE",
        "attempt": attempt,
        "iteration": 0,
        "status": status,
        "worker_id": "wk-1",
        "lease_epoch": 3,
        "reason": "",
        "resources": {},
        "input": {"x": 1},
        "output": {"logs": ["line one"]},
        "progress": 0.5,
        "scheduled_at": T0,
        "started_at": T0 + timedelta(seconds=1),
        "ended_at": T0 + timedelta(seconds=2),
        "retried": False,
        "version": 1,
    }


@dataclass
class FakeCommands:
    sent: list[tuple[str, str]] = field(default_factory=list)
    actors: list[str | None] = field(default_factory=list)

    def _record(self, action: str, wf_id: str, **kw: Any) -> Submitted:
        self.sent.append((action, wf_id))
        self.actors.append(kw.get("actor"))
        return Submitted(wf_id, f"cmd-{len(self.sent)}")

    def rerun(self, wf_id: str, task: str | None = None, **kw: Any) -> Submitted:
        return self._record(f"rerun {task}", wf_id, **kw)

    def retry(self, wf_id: str, **kw: Any) -> Submitted:
        return self._record("retry", wf_id, **kw)

    def terminate(self, wf_id: str, **kw: Any) -> Submitted:
        return self._record("terminate", wf_id, **kw)

    def cancel(self, wf_id: str, **kw: Any) -> Submitted:
        return self._record("cancel", wf_id, **kw)

    def pause(self, wf_id: str, **kw: Any) -> Submitted:
        return self._record("pause", wf_id, **kw)

    def resume(self, wf_id: str, **kw: Any) -> Submitted:
        return self._record("resume", wf_id, **kw)

    def signal(self, wf_id: str, output: Any, **kw: Any) -> Submitted:
        return self._record(f"signal {kw.get('ref')} {output}", wf_id, **kw)

    def review(self, wf_id: str, task_id: str, decision: str, **kw: Any) -> Submitted:
        return self._record(f"review {decision} {task_id} {kw.get('input')}", wf_id, **kw)


@dataclass
class Fakes:
    client: TestClient
    commands: FakeCommands
    asked: dict[str, Any]


@pytest.fixture
def fakes(monkeypatch: pytest.MonkeyPatch) -> Fakes:
    settings = replace(load_settings(), api=ApiSettings(auth="off"))
    topic = topics_for(settings).events
    asked: dict[str, Any] = {}
    rows = [wf_row("w1"), wf_row("w2", "COMPLETED")]
    asked["rows"] = rows  # a test may add one

    def newest_workflows(_e: Any, f: Any, start: int, size: int) -> Any:
        asked["search"] = (f, start, size)
        return rows

    def status_counts(_e: Any, f: Any) -> dict[str, int]:
        asked.setdefault("counts", []).append(f)
        return {"FAILED": 1, "COMPLETED": 1}

    def console_page(_e: Any, f: Any, statuses: Any, start: int, size: int, cap: int) -> Any:
        counts = status_counts(_e, replace(f, statuses=()))
        return counts, frozenset(), newest_workflows(_e, f, start, size)

    def workflow(_e: Any, wid: str) -> Any:
        if wid != "w1":
            return None, []
        status = asked.get("status", "FAILED")  # a test may change it
        return wf_row("w1", status), [task_row("a", "FAILED"), task_row("a", "FAILED", 2)]

    for name, fake in {
        "newest_workflows": newest_workflows,
        "status_counts": status_counts,
        "workflow": workflow,
        "task_outcomes": lambda _e, wid, ids: {
            i: {"logs": [LOGGED], "traceback": TRACE, "at": T0} for i in ids if i == "a-2"
        },
        "reflected": lambda _e: {topic: {0: 5, 1: 9}},
        "workflow_ids": lambda _e, f, limit: ["w1", "w2"],
        "started_definition": lambda _e, wid: {"definition": DEFINITION},
        "history": lambda _e, wid, failed_only=False: [
            {
                "workflow_id": wid,
                "seq": 1,
                "type": "task.failed",
                "occurred_at": T0,
                "payload": {"reason": "boom"},
                "kafka_partition": 0,
                "kafka_offset": 4,
            }
        ],
    }.items():
        monkeypatch.setattr(queries, name, fake)
    commands = FakeCommands()

    class Search:
        def search_text(self, text: str, limit: int) -> list[dict[str, Any]]:
            asked["text"] = text
            return [{"workflow_id": "w2", "kind": "task"}, {"workflow_id": "w2"}]

    class Pg:
        engine = None

    class Reads:  # the reads on the event loop (ADR 37), over the same fakes
        async def console_page(self, f: Any, statuses: Any, start: int, size: int, cap: int) -> Any:
            return console_page(None, f, statuses, start, size, cap)

        async def workflow(self, wid: str) -> Any:
            return workflow(None, wid)

    svc = Services(settings, Lazy(Pg), Lazy(Search), Lazy(lambda: commands))  # type: ignore[arg-type, return-value]
    svc.async_reads.put(Reads())  # type: ignore[arg-type]
    svc.log_ends.put(read_model_freshness.LogEnds(lambda: {0: 5, 1: 30}, 60, lambda: None))
    fake_settler(svc, {"wf-gone": ("unknown workflow 'wf-gone': pause_workflow refused", True)})
    return Fakes(TestClient(create_app(svc)), commands, asked)


def test_the_list_reads_the_filter_from_the_url_and_shows_counts_and_freshness(
    fakes: Fakes,
) -> None:
    page = fakes.client.get("/ui/?name=wf&status=FAILED&version=1&q=boom&size=25&start=25")
    assert page.status_code == 200, page.text
    f, start, size = fakes.asked["search"]
    assert (f.names, f.statuses, f.versions, f.ids, start, size) == (
        ("wf",),
        ("FAILED",),
        (1,),
        ("w2",),
        25,
        25,
    )
    # One count query, over the filter without its statuses (each count narrows to one).
    [counted] = fakes.asked["counts"]
    assert counted.statuses == () and counted.names == ("wf",)
    assert fakes.asked["text"] == "boom"
    assert 'href="/ui/workflows/w1"' in page.text and 'data-status="FAILED"' in page.text
    assert "offsets 0:5 1:9" in page.text
    assert "of 1</span>" in page.text  # the total is the chosen statuses' count, not a 2nd scan
    assert "about 21 events behind the log" in page.text


@pytest.mark.parametrize(
    ("query", "reason"),
    [
        ("version=x", "version must be an integer"),
        ("from=yesterday", "from must be a date"),
        ("status=NOPE", "unknown status"),
        ("size=7", "size must be one of"),
    ],
)
def test_bad_filters_are_a_400_naming_the_parameter(fakes: Fakes, query: str, reason: str) -> None:
    answer = fakes.client.get(f"/ui/?{query}")
    assert answer.status_code == 400 and reason in answer.json()["message"]


def test_the_list_escapes_every_value_a_row_shows(fakes: Fakes) -> None:
    # The rows' cells escape their values themselves (autoescape is off there: ADR 38).
    evil = "<i id=evil>x</i>&\"'"
    strings = {k: evil for k in ("name", "reason", "tenant")}
    strings["correlation_id"] = evil + "-c"  # one equal to the workflow id is not shown
    fakes.asked["rows"].append({**wf_row(evil, evil), **strings})
    page = fakes.client.get("/ui/")
    assert page.status_code == 200, page.text
    assert "<i id=evil>" not in page.text
    escaped = "&lt;i id=evil&gt;x&lt;/i&gt;&amp;&#34;&#39;"
    # id thrice (value, label, text), status thrice, name, reason, correlation id, tenant
    assert page.text.count(escaped) >= 10, page.text
    assert "/ui/workflows/%3Ci%20id%3Devil%3Ex%3C/i%3E%26%22%27" in page.text
    assert T0.strftime("%Y-%m-%d %H:%M:%S") in page.text  # the time, formatted by ``clock``


def test_a_bulk_action_confirms_with_the_count_before_sending(fakes: Fakes) -> None:
    form = {"action": "terminate", "scope": "filter", "status": "FAILED"}
    preview = fakes.client.post("/ui/bulk/preview", data=form)
    assert preview.status_code == 200
    assert '<span class="bulk-count">2</span>' in preview.text and fakes.commands.sent == []
    refused = fakes.client.post("/ui/bulk", data=form)
    assert refused.status_code == 400 and fakes.commands.sent == []
    done = fakes.client.post("/ui/bulk", data={**form, "confirm": "yes"})
    assert done.status_code == 200 and "Sent 2 terminate commands" in done.text
    assert fakes.commands.sent == [("terminate", "w1"), ("terminate", "w2")]


def test_a_bulk_action_on_a_selection_sends_only_the_selection(fakes: Fakes) -> None:
    data = {"action": "retry", "scope": "selected", "ids": ["w2"], "confirm": "yes"}
    assert fakes.client.post("/ui/bulk", data=data).status_code == 200
    assert fakes.commands.sent == [("retry", "w2")]
    assert fakes.commands.actors == ["anonymous"]  # who asked travels with the command
    assert fakes.client.post("/ui/bulk", data={**data, "action": "explode"}).status_code == 400


def test_a_workflow_page_draws_its_dag_and_timeline(fakes: Fakes) -> None:
    page = fakes.client.get("/ui/workflows/w1")
    assert page.status_code == 200, page.text
    assert 'class="node state-FAILED type-SIMPLE"' in page.text
    assert 'class="node state-NOT_STARTED type-SIMPLE"' in page.text
    assert 'data-source="a" data-target="b"' in page.text
    assert page.text.count('class="lane"') == 2  # two attempts of a
    assert "Rerun from task" in page.text
    assert fakes.client.get("/ui/workflows/nope").status_code == 404


REASON = "ValueError: " + "a reason longer than any list cell " * 6 + "(whole)"
LOGGED = {"at": "2026-11-29T08:01:12.345Z", "log": "probing <input> & co"}
TRACE = 'Traceback (most recent call last):\n  File "h.py", line 3\nValueError: <bad>\n'


def test_the_task_panel_shows_every_attempt_with_worker_lease_and_logs(
    fakes: Fakes, monkeypatch: pytest.MonkeyPatch
) -> None:
    failed = {**task_row("a", "FAILED", 2), "reason": REASON}
    rows = [task_row("a", "FAILED"), failed]
    monkeypatch.setattr(queries, "workflow", lambda _e, wid: (wf_row(wid), rows))
    panel = fakes.client.get("/ui/workflows/w1/tasks/a")
    assert panel.status_code == 200
    assert panel.text.count("<details") == 2 and "line one" in panel.text
    assert "wk-1" in panel.text and "<dt>lease epoch</dt><dd>3</dd>" in panel.text
    # ADR 60: the outcome's log lines (time and text, escaped) and its traceback, in
    # wrapping pres; only the attempt whose outcome carried them shows them.
    assert panel.text.count('class="log task-log"') == 1
    assert "08:01:12.345  probing &lt;input&gt; &amp; co" in panel.text
    assert '<pre class="log traceback">Traceback' in panel.text
    assert "ValueError: &lt;bad&gt;" in panel.text
    assert '/api/tasks/a-2/log"' in panel.text
    assert f'<pre class="log bad reason">{REASON}</pre>' in panel.text


def test_the_list_shows_a_failure_s_whole_reason(fakes: Fakes) -> None:
    long = "transcode failed: " + "ffmpeg said something long; " * 12 + "the end"
    fakes.asked["rows"].append({**wf_row("w3"), "reason": long})
    page = fakes.client.get("/ui/")
    assert page.status_code == 200
    assert f'<div class="muted small reason">{long}</div>' in page.text


def test_the_history_downloads_as_json(fakes: Fakes) -> None:
    answer = fakes.client.get("/ui/workflows/w1/history.json?failed=true")
    assert answer.headers["content-disposition"].endswith('w1-failed-events.json"')
    assert answer.json()[0]["type"] == "task.failed"
    assert "task.failed" in fakes.client.get("/ui/workflows/w1/history").text


def test_actions_send_commands_and_ask_the_page_to_re_read(fakes: Fakes) -> None:
    answer = fakes.client.post("/ui/workflows/w1/actions/retry")
    assert answer.status_code == 200 and answer.headers["hx-trigger"] == "wf-changed"
    fakes.asked["status"] = "RUNNING"
    fakes.client.post("/ui/workflows/w1/signal", data={"ref": "wait", "output": '{"ok": 1}'})
    assert fakes.commands.sent == [("retry", "w1"), ("signal wait {'ok': 1}", "w1")]
    bad = fakes.client.post("/ui/workflows/w1/signal", data={"output": "{nope"})
    assert bad.status_code == 400 and "not JSON" in bad.json()["message"]
    fakes.asked["status"] = "FAILED"
    assert fakes.client.post("/ui/workflows/w1/actions/explode").status_code == 400
    rerun = fakes.client.post("/ui/workflows/w1/actions/rerun", data={"task_id": "a"})
    assert rerun.status_code == 200
    assert fakes.commands.sent[-1] == ("rerun a", "w1")
    assert fakes.client.post("/ui/workflows/w1/actions/rerun").status_code == 400  # no task
    assert set(fakes.commands.actors) == {"anonymous"}


def test_an_action_answers_with_the_deciders_refusal(fakes: Fakes) -> None:
    answer = fakes.client.post("/ui/workflows/wf-gone/actions/pause")
    assert answer.status_code == 404
    assert "unknown workflow 'wf-gone'" in answer.json()["message"]
    assert answer.headers["X-Es-Sched-Token"] == answer.json()["token"]
    assert fakes.commands.sent == [("pause", "wf-gone")]  # the decider was asked


def test_lag_ignores_a_transaction_marker() -> None:
    assert read_model_freshness.lag_of({0: 10, 1: 4}, {0: 11, 1: 9}) == 5


def test_with_auth_on_pages_send_to_the_login_and_actions_are_refused(fakes: Fakes) -> None:
    svc = fakes.client.app.state.services  # type: ignore[attr-defined]
    svc.settings = replace(svc.settings, api=ApiSettings(auth="on"))
    page = fakes.client.get("/ui/?status=FAILED", follow_redirects=False)
    assert page.status_code == 303 and page.headers["location"].startswith("/ui/login?next=")
    bulk = fakes.client.post(
        "/ui/bulk",
        data={"action": "retry", "ids": ["w1"], "confirm": "yes"},
        headers={"HX-Request": "true"},
        follow_redirects=False,
    )
    assert bulk.status_code == 401 and fakes.commands.sent == []
