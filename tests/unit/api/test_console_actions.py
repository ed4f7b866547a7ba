"""The console's buttons and refusals from the one rule table (ADR 59), the workflow page's data
panel and history, and the definition editor's check, simulate and push, over fakes."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from es_sched.api import auth, correlation
from es_sched.api.actions import Refusal, offered, refusal, role_allows
from es_sched.api.ui import panels
from es_sched.commands import Submitted
from es_sched.projections.postgres import queries
from tests.unit.api.test_console_routes import T0, Fakes, fakes

pytestmark = pytest.mark.unit
__all__ = ["fakes"]  # the fixture, shared with the console's route tests

STEP = {"name": "s", "taskReferenceName": "one", "type": "SIMPLE"}


def test_offered_by_role_and_status() -> None:
    assert offered("viewer", "FAILED") == ()
    assert offered("worker", "RUNNING") == ()
    assert offered("operator", "FAILED") == ("retry", "restart", "rerun")
    assert offered("operator", "COMPLETED") == ("restart", "rerun")
    assert offered("admin", "RUNNING") == ("pause", "terminate", "cancel", "signal", "review")
    assert offered("operator", "PAUSED") == ("resume", "terminate", "cancel", "signal", "review")
    assert role_allows("retry", "operator") and not role_allows("retry", "viewer")


def test_refusals_say_the_role_first_then_the_state() -> None:
    assert refusal("retry", "viewer", "FAILED") == Refusal(
        403, "retry needs role operator; this key has role viewer"
    )
    by_state = refusal("pause", "operator", "COMPLETED")
    assert by_state is not None and by_state.status == 409
    assert by_state.reason == "only a RUNNING workflow can be paused; it is COMPLETED"
    assert refusal("pause", "operator", None) is None  # not in the read model: the decider says
    assert refusal("explode", "admin", "RUNNING") is not None


def _buttons(html: str) -> list[str]:
    actions = html.split('id="actions"', 1)[1].split("</div>", 1)[0]
    return re.findall(r"/actions/(\w+)", actions)


def test_the_page_shows_only_the_buttons_the_table_offers(fakes: Fakes) -> None:
    failed = fakes.client.get("/ui/workflows/w1").text
    assert _buttons(failed) == ["retry", "restart", "rerun"]
    fakes.asked["status"] = "RUNNING"
    running = fakes.client.get("/ui/workflows/w1").text
    assert _buttons(running) == ["pause", "terminate"]  # cancel: bulk only; signal: no WAIT


def test_a_viewer_sees_no_button_and_a_click_is_refused_with_the_reason(
    fakes: Fakes, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(auth, "ANONYMOUS", auth.Principal("anonymous", "viewer"))
    page = fakes.client.get("/ui/workflows/w1").text
    assert _buttons(page) == [] and "this key may only look" in page
    assert "bulk action" not in fakes.client.get("/ui/").text
    refused = fakes.client.post("/ui/workflows/w1/actions/retry")
    assert refused.status_code == 403
    assert refused.json()["message"] == "retry needs role operator; this key has role viewer"
    assert fakes.commands.sent == []


def test_a_stale_click_is_refused_by_state_and_sends_nothing(fakes: Fakes) -> None:
    refused = fakes.client.post("/ui/workflows/w1/actions/pause")  # w1 is FAILED
    assert refused.status_code == 409
    assert refused.json()["message"] == "only a RUNNING workflow can be paused; it is FAILED"
    signal = fakes.client.post("/ui/workflows/w1/signal", data={"output": "{}"})
    assert signal.status_code == 409 and fakes.commands.sent == []


def test_restart_is_sent_with_the_actor(fakes: Fakes, monkeypatch: pytest.MonkeyPatch) -> None:
    def restart(wf_id: str, **kw: Any) -> Submitted:
        return fakes.commands._record("restart", wf_id, **kw)

    monkeypatch.setattr(fakes.commands, "restart", restart, raising=False)
    assert fakes.client.post("/ui/workflows/w1/actions/restart").status_code == 200
    assert fakes.commands.sent == [("restart", "w1")] and fakes.commands.actors == ["anonymous"]


def test_the_live_fragment_redraws_the_buttons_only_when_the_status_changed(fakes: Fakes) -> None:
    same = fakes.client.get("/ui/workflows/w1/live?shown=FAILED").text
    assert 'hx-swap-oob="true"' not in same
    changed = fakes.client.get("/ui/workflows/w1/live?shown=RUNNING").text
    assert 'id="actions" data-for-status="FAILED" hx-swap-oob="true"' in changed


def test_the_history_shows_who_acted(fakes: Fakes, monkeypatch: pytest.MonkeyPatch) -> None:
    base = {"workflow_id": "w1", "occurred_at": T0, "kafka_partition": 0}
    events = [
        {**base, "seq": 1, "type": "workflow.retried", "payload": {}, "kafka_offset": 1},
        {**base, "seq": 2, "type": "task.completed", "payload": {}, "kafka_offset": 2},
    ]
    events[0]["actor"] = "key-ops-1"
    monkeypatch.setattr(queries, "history", lambda _e, wid, failed_only=False: events)
    html = fakes.client.get("/ui/workflows/w1/history").text
    rows = html.split("<tbody>", 1)[1].split("</tr>")
    assert "key-ops-1" in rows[0] and "system" in rows[1]


def test_the_data_panel_shows_input_output_and_variables(
    fakes: Fakes, monkeypatch: pytest.MonkeyPatch
) -> None:
    events = [
        {"type": "workflow.variables_set", "payload": {"variables": {"n": 2, "k": "v"}}},
    ]
    monkeypatch.setattr(queries, "history", lambda _e, wid, failed_only=False: events)
    html = fakes.client.get("/ui/workflows/w1/data").text
    assert 'id="wf-input"' in html and 'id="wf-output"' in html
    assert "&#34;n&#34;: 2" in html and "&#34;k&#34;: &#34;v&#34;" in html


def test_variables_fold_as_the_core_folds_them() -> None:
    definition = {"variables": {"n": 0, "keep": True}}
    events = [
        {"type": "workflow.variables_set", "payload": {"variables": {"n": 1}}},
        {"type": "task.completed", "payload": {"variables": {"n": 99}}},
        {"type": "workflow.variables_set", "payload": {"variables": {"m": 2}}},
    ]
    assert panels.variables(definition, events) == {"n": 1, "keep": True, "m": 2}
    restarted = [*events, {"type": "workflow.restarted", "payload": {"definition": None}}]
    assert panels.variables(definition, restarted) == {"n": 0, "keep": True}


def test_a_correlation_id_is_the_clients_only() -> None:
    assert correlation.given({"workflow_id": "w", "correlation_id": "w"}) is None
    assert correlation.given({"workflow_id": "w", "correlation_id": "order-7"}) == "order-7"


def test_problems_are_grouped_by_the_task_they_name() -> None:
    grouped = panels.problems_by_task(
        ["task 'a': no name", "task 'b': bad expression", "task 'a': dup", "no tasks"]
    )
    assert grouped == {"a": ["no name", "dup"], "b": ["bad expression"], None: ["no tasks"]}
    nested = {"tasks": [{"taskReferenceName": "f", "type": "FORK_JOIN", "forkTasks": [[STEP]]}]}
    assert panels.task_refs(nested) == [(0, "f", "FORK_JOIN"), (1, "one", "SIMPLE")]


EDITED = {
    "name": "edited",
    "version": 2,
    "schemaVersion": 2,
    "tasks": [
        {"name": "s", "taskReferenceName": "one", "type": "SIMPLE"},
        {
            "name": "pick",
            "taskReferenceName": "pick",
            "type": "SWITCH",
            "evaluatorType": "value-param",
            "expression": "k",
            "inputParameters": {"k": "${one.output.kind}"},
            "decisionCases": {"a": [{"name": "s", "taskReferenceName": "two", "type": "SIMPLE"}]},
        },
    ],
}


@pytest.fixture
def registry(fakes: Fakes, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    pushed: list[Any] = []
    known = {("edited", 1): {**EDITED, "version": 1}}
    monkeypatch.setattr(fakes.commands, "definitions", lambda: (known, {}), raising=False)

    def push_documents(docs: Any) -> list[str]:
        pushed.append(docs)
        return ["k"]

    monkeypatch.setattr(fakes.commands, "push_documents", push_documents, raising=False)
    return pushed


def test_the_editor_opens_the_latest_version_as_the_next(fakes: Fakes, registry: Any) -> None:
    page = fakes.client.get("/ui/definitions/edit?name=edited")
    assert page.status_code == 200 and "&#34;version&#34;: 2" in page.text
    assert "/ui/definitions/push" in page.text  # auth off: admin
    assert fakes.client.get("/ui/definitions/edit?name=nope").status_code == 404


def test_the_check_shows_each_problem_beside_its_task(fakes: Fakes, registry: Any) -> None:
    broken = json.loads(json.dumps(EDITED))
    broken["tasks"][1]["inputParameters"] = {"k": "${nowhere.output.kind}"}
    html = fakes.client.post("/ui/definitions/check", data={"definition": json.dumps(broken)}).text
    assert "would be refused" in html
    row = html.split('data-ref="pick"', 1)[1].split("</tr>", 1)[0]
    assert "nowhere" in row and "task-problem" in row
    first = html.split('data-ref="one"', 1)[1].split("</tr>", 1)[0]
    assert "task-problem" not in first
    refused = fakes.client.post("/ui/definitions/push", data={"definition": json.dumps(broken)})
    assert refused.status_code == 400 and "nowhere" in refused.json()["message"]
    assert registry == []
    simulated = fakes.client.post(
        "/ui/definitions/simulate", data={"definition": json.dumps(broken)}
    )
    assert "would be refused" in simulated.text and "sim-status" not in simulated.text


def test_simulate_previews_the_run_and_push_registers_it(fakes: Fakes, registry: Any) -> None:
    script = json.dumps([{"ref": "one", "status": "COMPLETED", "output": {"kind": "a"}}])
    form = {"definition": json.dumps(EDITED), "input": "{}", "script": script}
    html = fakes.client.post("/ui/definitions/simulate", data=form).text
    assert 'id="sim-status">COMPLETED' in html
    assert re.findall(r'<tr data-ref="(\w+)"', html) == ["one", "pick", "two"]
    bad = fakes.client.post("/ui/definitions/simulate", data={**form, "input": "[1]"})
    assert bad.status_code == 400 and "JSON object" in bad.json()["message"]
    pushed = fakes.client.post("/ui/definitions/push", data={"definition": json.dumps(EDITED)})
    assert pushed.status_code == 200 and "Pushed edited v2" in pushed.text
    assert [d.workflows[0]["version"] for d in registry] == [2]


def test_an_operator_may_check_but_not_push(
    fakes: Fakes, registry: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(auth, "ANONYMOUS", auth.Principal("anonymous", "operator"))
    assert "/ui/definitions/push" not in fakes.client.get("/ui/definitions/edit").text
    refused = fakes.client.post("/ui/definitions/push", data={"definition": json.dumps(EDITED)})
    assert refused.status_code == 403 and registry == []


def test_taskdefs_are_listed_with_their_limits(
    fakes: Fakes, monkeypatch: pytest.MonkeyPatch
) -> None:
    taskdefs = {"t": {"name": "t", "retryCount": 2, "concurrentExecLimit": 5}}
    monkeypatch.setattr(fakes.commands, "definitions", lambda: ({}, taskdefs), raising=False)
    html = fakes.client.get("/ui/taskdefs").text
    row = html.split('data-name="t"', 1)[1].split("</tr>", 1)[0]
    assert "2 · FIXED" in row and "5 at once" in row


def test_the_submit_form_takes_a_correlation_id_and_priority_0_to_8(
    fakes: Fakes, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent: list[dict[str, Any]] = []

    def submit(name: str, doc: Any, version: Any, priority: int, **kw: Any) -> Submitted:
        sent.append({"priority": priority, **kw})
        return Submitted("w9", "c9")

    monkeypatch.setattr(fakes.commands, "submit", submit, raising=False)
    monkeypatch.setattr(fakes.commands, "token", lambda wid: None, raising=False)
    form = {"name": "wf", "input": "{}", "priority": "9"}
    refused = fakes.client.post("/ui/submit", data=form, follow_redirects=False)
    assert refused.status_code == 400 and "priority" in refused.json()["message"]
    ok = {**form, "priority": "8", "correlation_id": " order-7 "}
    assert fakes.client.post("/ui/submit", data=ok, follow_redirects=False).status_code == 303
    plain = {**form, "priority": "0"}
    assert fakes.client.post("/ui/submit", data=plain, follow_redirects=False).status_code == 303
    assert [(s["priority"], s["correlation_id"]) for s in sent] == [(8, "order-7"), (0, None)]


def test_a_viewers_bulk_action_is_refused_by_the_table(
    fakes: Fakes, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(auth, "ANONYMOUS", auth.Principal("anonymous", "viewer"))
    form = {"action": "terminate", "ids": ["w1"], "confirm": "yes"}
    for path in ("/ui/bulk/preview", "/ui/bulk"):
        refused = fakes.client.post(path, data=form)
        assert refused.status_code == 403
        assert (
            refused.json()["message"] == "terminate needs role operator; this key has role viewer"
        )
    assert fakes.commands.sent == []
