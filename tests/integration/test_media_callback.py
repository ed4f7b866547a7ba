"""The callback handler against a local HTTP server (signed body, retries, refusals), and the
media handlers' registration on a worker."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from es_sched.errors import ConfigError
from es_sched.workers import TaskFailure, Worker
from es_sched.workers.media import TYPES, Toolkit, register_media
from es_sched.workers.media.callback import callback
from es_sched.workers.media.files import canonical_json
from testkit.net import free_port
from testkit.settings import settings_with
from tests.integration.media_harness import JSON, SECRET, context, make_kit

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def kit(tmp_path_factory: pytest.TempPathFactory) -> Toolkit:
    return make_kit(tmp_path_factory.mktemp("out"))


# -- callback -------------------------------------------------------------------------------
@pytest.fixture
def receiver() -> Iterator[tuple[str, list[JSON], list[int]]]:
    """A local HTTP server answering with the queued statuses (then 200), recording requests."""
    seen: list[JSON] = []
    answers: list[int] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            seen.append({"body": body, "headers": dict(self.headers), "path": self.path})
            self.send_response(answers.pop(0) if answers else 200)
            self.end_headers()

        def log_message(self, *_: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen, answers
    finally:
        server.shutdown()
        server.server_close()


def test_callback_body_is_signed_and_a_500_is_retried(
    kit: Toolkit, receiver: tuple[str, list[JSON], list[int]]
) -> None:
    url, seen, answers = receiver
    answers.append(500)
    ctx = context("media.callback")
    body = {"asset_id": "a-1", "status": "COMPLETED", "asset": {"uri": "file:///x.json"}}
    out = callback(ctx, {"url": f"{url}/hook", "body": body}, kit)
    assert (out["status"], out["attempts"]) == (200, 2)
    assert len(seen) == 2 and seen[0]["body"] == seen[1]["body"]
    sent = seen[1]["body"]
    assert json.loads(sent) == body and sent == canonical_json(body)
    headers = seen[1]["headers"]
    signed = f"{headers['X-Es-Sched-Timestamp']}.{ctx.task_id}.".encode() + sent
    expected = "sha256=" + hmac.new(SECRET.encode(), signed, hashlib.sha256).hexdigest()
    assert headers["X-Es-Sched-Signature"] == expected
    assert headers["X-Es-Sched-Delivery"] == ctx.task_id
    assert out["body_sha256"] == hashlib.sha256(sent).hexdigest()


def test_callback_4xx_fails_for_good_and_no_answer_fails_retryable(
    kit: Toolkit, receiver: tuple[str, list[JSON], list[int]]
) -> None:
    url, seen, answers = receiver
    answers.append(404)
    with pytest.raises(TaskFailure, match="answered 404") as caught:
        callback(context("media.callback"), {"url": url, "body": {}}, kit)
    assert caught.value.retryable is False and len(seen) == 1
    closed = f"http://127.0.0.1:{free_port()}/"
    with pytest.raises(TaskFailure, match="failed 4 times") as refused:
        callback(context("media.callback"), {"url": closed, "body": {}}, kit)
    assert refused.value.retryable is True


# -- registration ---------------------------------------------------------------------------
def test_register_media_serves_all_six_types_and_needs_the_secret() -> None:
    settings = settings_with({"ES_SCHED_MEDIA_CALLBACK_SECRET": "x"})
    worker = register_media(Worker(settings=settings), settings)
    assert sorted(worker.handlers) == sorted(TYPES) and len(TYPES) == 6
    unsigned = settings_with({"ES_SCHED_MEDIA_CALLBACK_SECRET": ""})
    with pytest.raises(ConfigError, match="ES_SCHED_MEDIA_CALLBACK_SECRET"):
        register_media(Worker(settings=unsigned), unsigned)
