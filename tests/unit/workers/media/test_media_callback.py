"""Callback signing and delivery rules (retries, backoff, final answers) without a network."""

from __future__ import annotations

import hashlib
import hmac
import itertools
import threading

import pytest

from es_sched.workers.media.callback import (
    DELIVERY_HEADER,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    deliver,
    received,
    sign,
    signed_headers,
    verify,
)
from es_sched.workers.media.files import canonical_json
from es_sched.workers.sdk import TaskCancelled, TaskFailure


def test_the_signature_covers_the_timestamp_the_delivery_id_and_the_body() -> None:
    signed = b"1700000000.task-1." + b'{"a":1}'
    expected = "sha256=" + hmac.new(b"Jefe", signed, hashlib.sha256).hexdigest()
    assert sign(b'{"a":1}', "Jefe", "1700000000", "task-1") == expected
    headers = signed_headers(b'{"a":1}', "Jefe", "task-1", 1700000000.9)
    assert (headers[TIMESTAMP_HEADER], headers[DELIVERY_HEADER]) == ("1700000000", "task-1")
    assert headers[SIGNATURE_HEADER] == expected


def test_verify_refuses_a_changed_part_a_wrong_secret_and_an_old_or_future_timestamp() -> None:
    body, now = b'{"a":1}', 1700000000.0
    headers = signed_headers(body, "Jefe", "task-1", now)
    got = received(headers)
    assert verify(body, "Jefe", got, now + 299, max_age_s=300)
    assert not verify(b'{"a":2}', "Jefe", got, now, max_age_s=300)
    assert not verify(body, "other", got, now, max_age_s=300)
    for name, value in ((TIMESTAMP_HEADER, "1700000100"), (DELIVERY_HEADER, "task-2")):
        assert not verify(body, "Jefe", received({**headers, name: value}), now, max_age_s=300)
    assert not verify(body, "Jefe", got, now + 301, max_age_s=300)  # a replay, later
    assert not verify(body, "Jefe", got, now - 301, max_age_s=300)  # a clock far behind
    assert not verify(body, "Jefe", received({}), now, max_age_s=300)


def test_the_signed_body_is_canonical_json() -> None:
    assert canonical_json({"b": 1, "a": "é"}) == '{"a":"é","b":1}'.encode()


class Waits(threading.Event):
    """Records each backoff instead of sleeping; set() makes the next wait report a cancel."""

    def __init__(self) -> None:
        super().__init__()
        self.waited: list[float] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.waited.append(float(timeout or 0))
        return self.is_set()


class Server:
    def __init__(self, *answers: int | OSError) -> None:
        self.answers, self.calls = list(answers), 0

    def __call__(self, url: str, body: bytes, headers: dict[str, str], timeout: float) -> int:
        self.calls += 1
        answer = self.answers.pop(0)
        if isinstance(answer, OSError):
            raise answer
        return answer


def run(server: Server, attempts: int = 4, cancel: Waits | None = None) -> tuple[int, int]:
    return deliver("http://cb/x", b"{}", dict, attempts, 0.5, 1.0, cancel or Waits(), server)


def test_each_post_is_signed_when_it_is_sent() -> None:
    clock = itertools.count(1700000000, 10)
    server = Server(503, 503, 200)
    sent: list[dict[str, str]] = []

    def post(url: str, body: bytes, headers: dict[str, str], timeout: float) -> int:
        sent.append(headers)
        return server(url, body, headers, timeout)

    def headers() -> dict[str, str]:
        return signed_headers(b"{}", "s", "task-1", next(clock))

    assert deliver("http://cb/x", b"{}", headers, 3, 0.5, 1.0, Waits(), post) == (200, 3)
    stamps = [h[TIMESTAMP_HEADER] for h in sent]
    assert stamps == ["1700000000", "1700000010", "1700000020"]
    assert {h[DELIVERY_HEADER] for h in sent} == {"task-1"}


def test_5xx_and_connection_errors_are_retried_with_doubling_backoff() -> None:
    waits = Waits()
    server = Server(ConnectionRefusedError("refused"), 503, 429, 204)
    assert run(server, cancel=waits) == (204, 4)
    assert waits.waited == [0.5, 1.0, 2.0]


def test_giving_up_after_the_attempts_is_a_retryable_failure() -> None:
    waits = Waits()
    with pytest.raises(TaskFailure, match="failed 3 times, last: HTTP 500") as caught:
        run(Server(500, TimeoutError("slow"), 500), attempts=3, cancel=waits)
    assert caught.value.retryable is True
    assert waits.waited == [0.5, 1.0]  # no pointless wait after the last attempt


@pytest.mark.parametrize("status", [400, 401, 404, 410, 302])
def test_other_answers_fail_for_good_at_once(status: int) -> None:
    server = Server(status, 200)
    with pytest.raises(TaskFailure, match=f"answered {status}") as caught:
        run(server)
    assert caught.value.retryable is False
    assert server.calls == 1


def test_cancellation_interrupts_the_backoff() -> None:
    waits = Waits()
    waits.set()
    server = Server(500, 200)
    with pytest.raises(TaskCancelled):
        run(server, cancel=waits)
    assert server.calls == 1
