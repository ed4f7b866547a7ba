"""Callback signing and delivery rules (retries, backoff, final answers) without a network."""

from __future__ import annotations

import threading

import pytest

from es_sched.workers.media.callback import deliver, sign, verify
from es_sched.workers.media.files import canonical_json
from es_sched.workers.sdk import TaskCancelled, TaskFailure


def test_signature_is_hmac_sha256_of_the_body() -> None:
    # RFC 4231, test case 2
    expected = "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
    assert sign(b"what do ya want for nothing?", "Jefe") == f"sha256={expected}"
    assert verify(b"what do ya want for nothing?", "Jefe", f"sha256={expected}")
    assert not verify(b"what do ya want for nothing!", "Jefe", f"sha256={expected}")
    assert not verify(b"what do ya want for nothing?", "other", f"sha256={expected}")
    assert not verify(b"x", "Jefe", None)


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
    return deliver("http://cb/x", b"{}", {}, attempts, 0.5, 1.0, cancel or Waits(), server)


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
