"""The native API's parts that need no stack: strict request bodies, the documented responses,
the queue rows, the definition diagram and default input, the media view, a token's shape."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError

from es_sched import bootstrap
from es_sched.api.app import create_app
from es_sched.api.native.models import (
    BlacklistInfo,
    Freshness,
    Queue,
    RolloutInfo,
    Seen,
    SubmitRequest,
)
from es_sched.api.native.routes import queues_of
from es_sched.api.ui.diagram import default_input, diagram
from es_sched.api.ui.media import media_view
from es_sched.api.ui.render import templates
from es_sched.settings import ApiSettings, load_settings
from tests.unit.api.auth_support import Clock, MemoryKeys, key
from tests.unit.api.auth_support import app as auth_app


@pytest.fixture
def client() -> TestClient:
    settings = replace(load_settings(), api=ApiSettings(auth="off"))
    return TestClient(create_app(bootstrap.api_services(settings)))


def test_a_submit_with_an_unknown_field_is_a_400_naming_it(client: TestClient) -> None:
    answer = client.post("/api/v1/workflows", json={"name": "flow", "prio": 1})
    assert answer.status_code == 400
    assert answer.json()["validationErrors"][0]["path"] == "body.prio"


def test_a_token_that_is_not_partition_offset_is_a_400(client: TestClient) -> None:
    answer = client.get("/api/v1/workflows/wf-1", params={"after": "soon"})
    assert answer.status_code == 400
    assert "PARTITION:OFFSET" in answer.json()["message"]


def test_submit_request_bounds() -> None:
    with pytest.raises(ValidationError):
        SubmitRequest(name="flow", priority=10)
    assert SubmitRequest(name="flow").priority == 4


def test_openapi_documents_the_native_responses(client: TestClient) -> None:
    doc = client.get("/openapi.json").json()
    paths = doc["paths"]
    for path in (
        "/api/v1/workflows",
        "/api/v1/workflows/{workflow_id}",
        "/api/v1/queues",
        "/api/v1/workers",
        "/api/v1/workflows/{workflow_id}/history",
        "/api/v1/workflows/{workflow_id}/verify",
        "/api/v1/config/{key}",
    ):
        assert path in paths, path
    ok = paths["/api/v1/workflows/{workflow_id}"]["get"]["responses"]["200"]
    assert ok["content"]["application/json"]["schema"]["$ref"].endswith("/WorkflowAnswer")
    schemas = doc["components"]["schemas"]
    assert {"reflects", "lag"} <= set(schemas["Freshness"]["properties"])
    assert schemas["SubmitRequest"]["additionalProperties"] is False


def test_queue_rows_carry_the_oldest_age() -> None:
    now = datetime(2026, 1, 1, 12, tzinfo=UTC)
    rows = [
        {
            "task_type": "t",
            "priority": 1,
            "depth": 3,
            "leased": 1,
            "oldest": now - timedelta(seconds=90),
        },
        {"task_type": "t", "priority": 4, "depth": 0, "leased": 2, "oldest": None},
    ]
    first, second = queues_of(rows, now)
    assert (first.depth, first.leased, first.oldestAgeS) == (3, 1, 90.0)
    assert (second.depth, second.oldestAgeS) == (0, None)


def test_the_diagram_has_a_box_per_task_and_branches_indented() -> None:
    d = diagram(
        {
            "tasks": [
                {"name": "probe", "taskReferenceName": "p", "type": "SIMPLE"},
                {
                    "name": "fork",
                    "taskReferenceName": "f",
                    "type": "FORK_JOIN",
                    "forkTasks": [
                        [{"name": "a", "taskReferenceName": "a"}],
                        [{"name": "b", "taskReferenceName": "b"}],
                    ],
                },
            ]
        }
    )
    labels = [(b.label, b.branch) for b in d.boxes]
    assert labels == [
        ("p: probe", False),
        ("f: fork", False),
        ("branch 1", True),
        ("a: a", False),
        ("branch 2", True),
        ("b: b", False),
    ]
    assert d.boxes[3].x > d.boxes[1].x and d.height >= len(d.boxes) * 30


def test_default_input_prefers_the_template_then_names_the_parameters() -> None:
    assert default_input({"inputTemplate": {"a": 1}, "inputParameters": ["b"]}) == {"a": 1}
    assert default_input({"inputParameters": ["src", "asset_id"]}) == {
        "src": None,
        "asset_id": None,
    }
    assert default_input({}) == {}


def test_media_view_collects_what_the_media_tasks_made() -> None:
    def task(ref: str, kind: str, output: object, status: str = "COMPLETED") -> dict[str, object]:
        return {"ref": ref, "task_type": kind, "status": status, "output": output}

    view = media_view(
        [
            task("probe", "media.probe", {"height": 1080, "width": 1920, "duration": 4.0}),
            task("t720", "media.transcode", {"uri": "file:///720.mp4", "height": 720}),
            task("t480", "media.transcode", {}, status="IN_PROGRESS"),
            task("thumb", "media.thumbnail", {"sprite": {"uri": "file:///sprite.jpg"}}),
            task("pkg", "media.package", {"$ref": "event", "workflow_id": "w", "seq": 9}),
            task("asset", "media.write_asset", {"asset_id": "a1", "outputs": 5, "bytes": 10}),
        ]
    )
    assert view.is_media
    assert [r["uri"] for r in view.renditions] == ["file:///720.mp4"]
    assert view.thumbnails == [{"ref": "thumb", "kind": "sprite", "uri": "file:///sprite.jpg"}]
    assert view.package is None and view.large == ["pkg"]
    assert view.asset is not None and view.asset["asset_id"] == "a1"


def test_pages_show_what_they_reflect_and_a_lag_notice() -> None:
    part = templates.env.get_template("ops_freshness.html")
    at, age = datetime(2026, 1, 1, tzinfo=UTC), 120.0
    behind = Freshness(
        topic="p.events",
        reflects={0: 5, 1: 7},
        lag={0: 0, 1: 3},
        lagging=True,
        endsReadAt=at,
        endsAgeMs=age,
    )
    text = " ".join(part.render(fresh=behind).split())
    assert "behind the log by 3 event(s) on partition 1" in text
    assert "reflects p.events [0]@5 [1]@7" in text
    caught_up = Freshness(
        topic="p.events", reflects={0: 5}, lag={0: 0}, lagging=False, endsReadAt=at, endsAgeMs=age
    )
    text = " ".join(part.render(fresh=caught_up).split())
    assert "behind" not in text and "caught up with the log" in text
    assert "its end read 120 ms ago" in text


@pytest.mark.parametrize(
    ("role", "method", "path", "body"),
    [
        ("viewer", "POST", "/api/v1/workflows", {"name": "flow"}),
        ("viewer", "POST", "/api/v1/workflows/wf-1/verify", None),
        ("viewer", "GET", "/api/v1/config", None),
        ("operator", "GET", "/api/v1/config/ban-version:1.0", None),
        ("operator", "PUT", "/api/v1/config/ban-version:1.0", {}),
        ("operator", "DELETE", "/api/v1/config/ban-version:1.0", None),
        ("worker", "GET", "/api/v1/queues", None),
        ("viewer", "POST", "/api/v1/workers/w1/lift", None),
        ("viewer", "POST", "/ui/workers/w1/lift", None),
        (
            "viewer",
            "POST",
            "/api/v1/workers/rollouts",
            {"taskType": "t", "candidate": "2", "current": "1", "share": 0.2},
        ),
        ("viewer", "POST", "/api/v1/workers/rollouts/t/revert", None),
        ("viewer", "POST", "/api/v1/workers/version-stops/t/2/lift", None),
        ("viewer", "POST", "/ui/workers/rollouts/t/revert", None),
        ("viewer", "POST", "/ui/workers/version-stops/t/2/lift", None),
        ("worker", "GET", "/api/tasks/queue/unplaceable", None),
    ],
)
def test_each_route_asks_for_its_role(role: str, method: str, path: str, body: object) -> None:
    keys, clock = MemoryKeys(), Clock()
    client = TestClient(auth_app(keys, clock))
    answer = client.post(
        "/api/token", json=dict(zip(("keyId", "keySecret"), key(keys, role, clock), strict=True))
    )
    jwt = answer.json()["token"]
    refused = client.request(method, path, json=body, headers={"X-Authorization": jwt})
    assert refused.status_code == 403, refused.text
    assert role in refused.json()["message"]


def test_a_blacklisted_workers_row_says_why_and_offers_the_lift_to_an_operator_only() -> None:
    at = datetime(2026, 12, 7, 1, 55, tzinfo=UTC)
    info = BlacklistInfo(
        since=at,
        until=at + timedelta(minutes=10),
        why="6 of 10 failed",
        failures=[{"taskId": "t1", "reason": "GPU driver error", "at": at, "fault": "host fault"}],
        decidedBy="dispatcher-0",
    )
    w = SimpleNamespace(workerId="media-1", blacklist=info)
    part = templates.env.get_template("_blacklist.html")
    shown = " ".join(part.render(w=w, can_lift=True).split())
    assert "Blacklisted until 2026-12-07 02:05:00 UTC</strong>: 6 of 10 failed" in shown
    assert "host fault · t1: GPU driver error" in shown
    assert 'action="/ui/workers/media-1/lift"' in shown
    assert "/lift" not in part.render(w=w, can_lift=False)


def test_a_queue_nobody_can_take_says_why() -> None:
    q = Queue(
        taskType="media.probe",
        priority=4,
        depth=19,
        leased=0,
        oldestScheduledAt=None,
        oldestAgeS=None,
        unplaceable="pool media: 1 worker, blacklisted until 02:05: 6 of 10 failed",
        unplaceableReason="blacklisted",
    )
    page = templates.env.get_template("ops_queues.html")
    fresh = Freshness(
        topic="p.events",
        reflects={0: 5},
        lag={0: 0},
        lagging=False,
        endsReadAt=datetime(2026, 12, 7, 2, tzinfo=UTC),
        endsAgeMs=12.0,
    )
    request = SimpleNamespace(
        state=SimpleNamespace(principal=None), cookies={}, url=SimpleNamespace(path="/ui/queues")
    )
    text = " ".join(page.render(queues=[q], fresh=fresh, request=request).split())
    assert 'blacklisted</span> <span class="unplaceable">pool media: 1 worker' in text


def test_the_versions_section_shows_a_decided_rollout_and_offers_the_revert_to_an_operator() -> (
    None
):
    at = datetime(2026, 12, 7, 2, 10, tzinfo=UTC)
    r = RolloutInfo(
        taskType="media.transcode",
        candidate="2.0.0",
        current="1.0.0",
        state="stopped",
        share=0.2,
        given=0.0,
        margin=0.05,
        minSamples=20,
        at=at,
        by="dispatcher-0",
        why="2.0.0: 12 of 20 failed (60%) against 1.0.0: 4 of 80 failed (5%), margin 5%",
        seenCandidate=Seen(failureRate=0.6, outcomes=20, failures=12, windowEnd=at.isoformat()),
        seenCurrent=Seen(failureRate=0.05, outcomes=80, failures=4, windowEnd=at.isoformat()),
    )
    fleet = SimpleNamespace(rollouts=[r], versionStops=[], versionRules=[])
    part = templates.env.get_template("_versions.html")
    shown = " ".join(part.render(fleet=fleet, can_lift=True).split())
    assert 'class="status FAILED">stopped</span>' in shown
    assert '0% <span class="muted">(share 20%)</span>' in shown
    assert "2.0.0 60.0% of 20 · 1.0.0 5.0% of 80 · margin 5%" in shown
    assert "dispatcher-0 at 02:10:00" in shown
    assert 'action="/ui/workers/rollouts/media.transcode/revert"' in shown
    assert "/revert" not in part.render(fleet=fleet, can_lift=False)
