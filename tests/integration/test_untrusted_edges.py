"""Untrusted input at three edges, on one running system (private topics and schema): a
decider, a dispatcher, ``es-sched api --workers 2`` with auth on, and a media worker in this
process.

- Scripts (ADR 76): hostile INLINE scripts (an infinite loop, a 1 GB allocation, a reach for
  the host's globals) and a javascript SWITCH whose regular expression backtracks past any
  limit (QuickJS never interrupts its matcher: the sandbox's wall-time deadline kills the
  child, and the decider's log says so) are started first, ordinary workflows of the same
  definitions after them. Each hostile one ends FAILED with its breach recorded in
  ``task.failed`` (the globals: COMPLETED, finding none); the ordinary ones, decided after them
  by the same decider process, complete. The audit over the log replays the breaches from it.
- Callbacks (ADR 77): the documented receiver, extracted from docs/security.md and run as it
  is, takes the signed callback of a real workflow's ``media.callback`` task; the same request sent
  again is "seen", 301 s later (the snippet's clock moved) "stale", with a changed body
  "forged".
- Log-ins (``api.throttle``): after the key's limit of wrong secrets from one address, every
  attempt there (the right secret too, the console's form too) answers 429 with Retry-After,
  while the right secret from another address logs in; an address failing on many keys is
  refused for all. Each request is a new connection, which the kernel spreads over the two API
  processes: the counts are shared, or more than the limit would answer 401.
"""

from __future__ import annotations

import json
import re
import tempfile
import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from es_sched.domain.events import Event, TaskFailed
from es_sched.domain.scripts import breach, recorded_breach
from es_sched.workers.media import register_media
from testkit import ROOT
from testkit.api import Api, api, keyed_env
from testkit.runtime import Env, Role, assert_audit_clean, final_status, read_events, roles
from testkit.wait import wait_until
from tests.integration.worker_harness import Running, make_worker

pytestmark = pytest.mark.integration
TIME = "exceeded its time limit of 100 ms"
MEMORY = "exceeded its memory limit of 32 MiB"
CALC = {
    "name": "sandbox_calc",
    "version": 1,
    "schemaVersion": 2,
    "tasks": [
        {
            "name": "calc",
            "taskReferenceName": "calc",
            "type": "INLINE",
            "inputParameters": {
                "evaluatorType": "javascript",
                "expression": "${workflow.input.script}",
                "n": "${workflow.input.n}",
            },
        }
    ],
    "outputParameters": {"result": "${calc.output.result}"},
}
ROUTE_SCRIPT = "/(a+)+$/.test($.text) ? 'repeated' : 'other'"
ROUTE = {
    "name": "sandbox_route",
    "version": 1,
    "schemaVersion": 2,
    "tasks": [
        {
            "name": "route",
            "taskReferenceName": "route",
            "type": "SWITCH",
            "evaluatorType": "javascript",
            "expression": ROUTE_SCRIPT,
            "inputParameters": {"text": "${workflow.input.text}"},
            "decisionCases": {
                "repeated": [
                    {
                        "name": "mark",
                        "taskReferenceName": "mark",
                        "type": "SET_VARIABLE",
                        "inputParameters": {"routed": "repeated"},
                    }
                ]
            },
        }
    ],
}
LOOP = "while (true) {}"
BOMB = "new Array(1024 * 1024 * 1024).fill(1).length"
GLOBALS = (
    "[typeof require, typeof process, typeof std, typeof os,"
    " (function(){}).constructor('return typeof print + typeof scriptArgs')()].join(' ')"
)
EVIL_TEXT = "a" * 40 + "b"


CALLBACK_SECRET = "untrusted-edges-callback-secret"
CALLBACK = {
    "name": "edges_callback",
    "version": 1,
    "schemaVersion": 2,
    "tasks": [
        {
            "name": "media.callback",
            "taskReferenceName": "notify",
            "inputParameters": {"url": "${workflow.input.url}", "body": "${workflow.input.body}"},
        }
    ],
}
CALLBACK_TASKDEF = {
    "name": "media.callback",
    "retryCount": 0,
    "timeoutSeconds": 60,
    "responseTimeoutSeconds": 60,
    "resources": {"cpu": 0.1, "memory_mb": 64},
}
KEY_FAILURES, ADDRESS_FAILURES = 3, 8


@dataclass
class System:
    env: Env
    decider: Role
    api: Api
    worker_id: str


@pytest.fixture(scope="module")
def system() -> Iterator[System]:
    with keyed_env() as env:
        env.extra["ES_SCHED_MEDIA_CALLBACK_SECRET"] = CALLBACK_SECRET
        env.extra["ES_SCHED_DISPATCH_HEARTBEAT_S"] = "0.5"
        env.create()
        with tempfile.TemporaryDirectory() as folder:  # one client pushes all three
            path = Path(folder) / "edges.json"
            path.write_text(json.dumps([CALC, ROUTE, CALLBACK, CALLBACK_TASKDEF]))
            env.push_files(path)
        limits = {
            "ES_SCHED_API_AUTH": "on",
            "ES_SCHED_API_WORKERS": "2",
            "ES_SCHED_API_LOGIN_KEY_FAILURES": str(KEY_FAILURES),
            "ES_SCHED_API_LOGIN_ADDRESS_FAILURES": str(ADDRESS_FAILURES),
            "ES_SCHED_API_LOGIN_WINDOW_S": "600",
        }
        worker = register_media(make_worker(env.settings), env.settings)
        with ExitStack() as stack, ThreadPoolExecutor(1) as pool:
            # the API's processes start while the roles do (each waits for its own)
            server = pool.submit(stack.enter_context, api(env, **limits))
            decider, _ = stack.enter_context(roles(env, "decider", "dispatcher"))
            stack.enter_context(Running(worker))
            yield System(env, decider, server.result(), worker.worker_id)


def ended(env: Env, ids: list[str]) -> dict[str, list[Event]]:
    found = read_events(env)
    return {wf: found.get(wf, []) for wf in ids}


def wait_ended(env: Env, ids: list[str]) -> dict[str, list[Event]]:
    def every_one_ended() -> bool:
        return all(final_status(h) not in ("", "RUNNING") for h in ended(env, ids).values())

    wait_until(
        every_one_ended, 120, lambda: f"{[final_status(h) for h in ended(env, ids).values()]}"
    )
    return ended(env, ids)


def failure(events: list[Event]) -> str:
    reasons = [e.payload.reason for e in events if isinstance(e.payload, TaskFailed)]
    assert len(reasons) == 1, reasons
    return reasons[0]


# -- scripts (ADR 76) ------------------------------------------------------------------------
def test_hostile_scripts_fail_their_workflow_and_the_decider_goes_on(system: System) -> None:
    env, role = system.env, system.decider
    hostile = [
        *env.submit("sandbox_calc", [{"script": s, "n": 1} for s in (LOOP, BOMB, GLOBALS)]),
        *env.submit("sandbox_route", [{"text": EVIL_TEXT}]),
    ]
    # submitted after the hostile ones: the same decider reaches them only past those
    ordinary = [
        *env.submit("sandbox_calc", [{"script": "$.n * 2", "n": 21}]),
        *env.submit("sandbox_route", [{"text": "aaaa"}, {"text": "abab"}]),
    ]
    ids = [s.workflow_id for s in (*hostile, *ordinary)]
    runs = wait_ended(env, ids)
    loop, bomb, globals_, evil, calc, repeated, other = (runs[wf] for wf in ids)

    calc_inputs = {"evaluatorType": "javascript", "n": 1}
    assert final_status(loop) == "FAILED"
    assert failure(loop) == breach(TIME, LOOP, {**calc_inputs, "expression": LOOP})
    assert final_status(bomb) == "FAILED"
    assert failure(bomb) == breach(MEMORY, BOMB, {**calc_inputs, "expression": BOMB})
    assert final_status(globals_) == "COMPLETED"
    assert globals_[-1].payload.output == {  # type: ignore[attr-defined]
        "result": "undefined undefined undefined undefined undefinedundefined"
    }
    # what proves the sandbox's deadline fired (not QuickJS's interrupt): the kill, logged
    role.wait_log("killed the script sandbox process", 10)
    assert final_status(evil) == "FAILED"
    reason = failure(evil)
    assert reason == "switch evaluation failed: " + breach(TIME, ROUTE_SCRIPT, {"text": EVIL_TEXT})
    assert recorded_breach(reason) is not None

    assert final_status(calc) == "COMPLETED"
    assert calc[-1].payload.output == {"result": 42}  # type: ignore[attr-defined]
    assert [final_status(repeated), final_status(other)] == ["COMPLETED", "COMPLETED"]
    assert role.proc.poll() is None  # one decider process decided them all
    assert_audit_clean(env)


# -- callbacks (ADR 77) ----------------------------------------------------------------------
def readme_receiver() -> dict[str, Any]:
    """The documented receiver (docs/security.md), run as it is: the python block after its
    marker comment."""
    page = (ROOT / "docs" / "security.md").read_text()
    found = re.search(r"<!-- receiver: [^>]*-->\n```python\n(.*?)```", page, re.S)
    assert found, "the receiver block of docs/security.md is missing"
    namespace: dict[str, Any] = {}
    exec(compile(found[1], "docs/security.md receiver", "exec"), namespace)  # noqa: S102
    return namespace


@dataclass
class Receiver:
    """An HTTP server answering with the documented receiver's verdict (200 new/seen, else 401)."""

    code: dict[str, Any] = field(default_factory=readme_receiver)
    requests: list[tuple[dict[str, str], bytes, str]] = field(default_factory=list)

    def serve(self) -> ThreadingHTTPServer:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                verdict = receiver.code["verdict"](self.headers, body, CALLBACK_SECRET.encode())
                receiver.requests.append((dict(self.headers), body, verdict))
                self.send_response(200 if verdict in ("new", "seen") else 401)
                self.end_headers()

            def log_message(self, *_: Any) -> None:
                return

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return server


def test_the_documented_receiver_takes_a_real_callback_and_refuses_its_replays(
    system: System,
) -> None:
    receiver = Receiver()
    server = receiver.serve()
    url = f"http://127.0.0.1:{server.server_address[1]}/hook"
    try:
        body = {"asset_id": "edge-1", "status": "COMPLETED"}
        (started,) = system.env.submit("edges_callback", [{"url": url, "body": body}])
        (run,) = wait_ended(system.env, [started.workflow_id]).values()
        assert final_status(run) == "COMPLETED", run[-1]
        assert [verdict for *_, verdict in receiver.requests] == ["new"]
        headers, sent, _ = receiver.requests[0]
        assert json.loads(sent) == body

        def again(sent_body: bytes = sent) -> tuple[int, str]:
            answer = httpx.post(url, content=sent_body, headers=headers, timeout=30)
            return answer.status_code, receiver.requests[-1][2]

        assert again() == (200, "seen")  # the same request replayed: nothing acted on
        assert again(sent.replace(b"edge-1", b"edge-2")) == (401, "forged")
        real_time = receiver.code["time"]
        later = real_time.time() + 301  # the snippet's clock, 301 s on
        receiver.code["time"] = SimpleNamespace(time=lambda: later)
        receiver.code["SEEN"].clear()  # even a receiver that forgot the id refuses it
        assert again() == (401, "stale")
        receiver.code["time"] = real_time
    finally:
        server.shutdown()
        server.server_close()
    assert_audit_clean(system.env)


# -- log-ins (api.throttle) ------------------------------------------------------------------
def from_address(address: str) -> httpx.Client:
    """A client whose every request is a new connection from ``address`` (a loopback one)."""
    transport = httpx.HTTPTransport(local_address=address, retries=0)
    limits = httpx.Limits(max_keepalive_connections=0)
    return httpx.Client(transport=transport, limits=limits, timeout=60)


def test_failed_log_ins_are_throttled_per_key_and_address_across_api_processes(
    system: System,
) -> None:
    env, url = system.env, system.api.url
    made = json.loads(env.cli("api", "keys", "create", "--role", "viewer", "--json"))
    right = {"keyId": made["keyId"], "keySecret": made["keySecret"]}
    wrong = {**right, "keySecret": "not-the-secret"}
    with from_address("127.0.0.1") as a, from_address("127.0.0.2") as b:
        token = f"{url}/api/token"
        first = [a.post(token, json=wrong).status_code for _ in range(KEY_FAILURES)]
        assert first == [401] * KEY_FAILURES
        after = [a.post(token, json=doc) for doc in (wrong, wrong, right, wrong, right, wrong)]
        assert [r.status_code for r in after] == [429] * 6, [r.text for r in after]
        waits = {int(r.headers["Retry-After"]) for r in after}
        assert all(0 < w <= 600 for w in waits), waits
        assert after[0].json()["status"] == 429
        # the console's form is the same log-in
        form = {"keyId": right["keyId"], "keySecret": right["keySecret"], "next": "/ui/"}
        page = a.post(f"{url}/ui/login", data=form, follow_redirects=False)
        assert page.status_code == 429 and "Retry-After" in page.headers
        assert "too many failed log-ins" in page.text
        # another address is not blocked by those failures
        assert b.post(token, json=right).status_code == 200
        logged_in = b.post(f"{url}/ui/login", data=form, follow_redirects=False)
        assert logged_in.status_code == 303 and "es_sched_token" in logged_in.headers["set-cookie"]

    # an address failing on many keys is refused for every key, its right ones too
    with from_address("127.0.0.3") as c:
        for _ in range(ADDRESS_FAILURES):
            guess = {"keyId": str(uuid.uuid4()), "keySecret": "guess"}
            assert c.post(token, json=guess).status_code == 401
        refused = c.post(token, json=right)
        assert refused.status_code == 429 and int(refused.headers["Retry-After"]) > 0
