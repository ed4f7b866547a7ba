"""The review queue's page and forms and its native routes (ADR 71), over fake read models:
what they list, what a decision sends, and that bad input is a 4xx with a reason."""

from __future__ import annotations

from typing import Any

import pytest

from es_sched.api.ui import review
from es_sched.projections.postgres import queries
from tests.unit.api.test_console_routes import Fakes, fakes, task_row

pytestmark = pytest.mark.unit
__all__ = ["fakes"]


@pytest.fixture
def parked(fakes: Fakes, monkeypatch: pytest.MonkeyPatch) -> Fakes:
    row: dict[str, Any] = {
        **task_row("encode", "PARKED_FOR_REVIEW", 3),
        "reason": "ffmpeg <exited> 1",
        "input": {"codec": "h264", "note": "<b>x</b>"},
        "workflow_name": "media",
        "workflow_status": "RUNNING",
    }
    monkeypatch.setattr(queries, "parked_tasks", lambda _e, limit=200: [row])
    # What the rows reflect is every operations page's (tested there); no broker here.
    monkeypatch.setattr(review, "freshness_of", lambda _svc: None)
    return fakes


def test_the_page_lists_parked_tasks_with_their_input_in_the_retry_form(parked: Fakes) -> None:
    page = parked.client.get("/ui/review")
    assert page.status_code == 200, page.text
    assert 'data-task-id="encode-3"' in page.text and "PARKED_FOR_REVIEW" in page.text
    assert "ffmpeg &lt;exited&gt; 1" in page.text  # escaped
    assert "&#34;note&#34;: &#34;&lt;b&gt;x&lt;/b&gt;&#34;" in page.text  # the input, escaped
    assert 'action="/ui/review/w1/encode-3"' in page.text
    api = parked.client.get("/api/v1/review").json()["tasks"]
    assert [(t["workflowId"], t["task"]["taskId"], t["task"]["attempt"]) for t in api] == [
        ("w1", "encode-3", 3)
    ]


def test_a_retry_sends_the_edited_input_and_a_fail_sends_none(parked: Fakes) -> None:
    form = {"decision": "retry", "input": '{"codec": "h264", "height": 480}', "reason": "smaller"}
    done = parked.client.post("/ui/review/w1/encode-3", data=form, follow_redirects=False)
    assert done.status_code == 303 and done.headers["location"] == "/ui/review"
    done = parked.client.post("/ui/review/w1/encode-3", data={"decision": "fail", "input": "x"})
    assert done.status_code == 200  # followed to the page; a fail ignores the input box
    assert parked.commands.sent == [
        ("review retry encode-3 {'codec': 'h264', 'height': 480}", "w1"),
        ("review fail encode-3 None", "w1"),
    ]


@pytest.mark.parametrize(
    ("form", "says"),
    [
        ({"decision": "retry", "input": "{bad"}, "the input is not JSON"),
        ({"decision": "retry", "input": "[1, 2]"}, "the input must be a JSON object"),
        ({"decision": "approve"}, "decision must be retry or fail"),
    ],
)
def test_bad_decisions_are_a_400_and_send_nothing(
    parked: Fakes, form: dict[str, str], says: str
) -> None:
    answer = parked.client.post("/ui/review/w1/encode-3", data=form)
    assert answer.status_code == 400 and says in answer.text
    assert parked.commands.sent == []


def test_the_native_route_takes_only_retry_or_fail(parked: Fakes) -> None:
    url = "/api/v1/workflows/w1/tasks/encode-3/review"
    refused = parked.client.post(url, json={"decision": "approve"})
    assert refused.status_code == 400 and "decision" in refused.text
    answer = parked.client.post(url, json={"decision": "retry", "input": {"height": 360}})
    assert answer.status_code == 200, answer.text
    assert parked.commands.sent == [("review retry encode-3 {'height': 360}", "w1")]
