"""``media.callback``: POST a JSON body to the caller's URL, signed, retried with backoff.

Input: ``url`` (http or https) and ``body`` (any JSON value). The request body is the
canonical JSON of ``body`` (sorted keys, no spaces, UTF-8). Each POST carries
``X-Es-Sched-Delivery: <task id>`` (the same on every POST of the task, so the receiver can
drop duplicates: delivery is at least once), ``X-Es-Sched-Timestamp: <unix seconds>`` (when
this POST was signed; a retry is signed afresh) and ``X-Es-Sched-Signature: sha256=<hex
HMAC-SHA256 of "<timestamp>.<delivery>." + body>`` keyed with ``ES_SCHED_MEDIA_CALLBACK_SECRET``.
The timestamp and the id are inside the signed bytes, so a receiver that refuses an old
timestamp and an id it has taken refuses every replay (ADR 77; the receiver in
docs/security.md does exactly that). Within one task attempt, connection errors,
timeouts, 408, 429 and 5xx answers are retried after ``ES_SCHED_MEDIA_CALLBACK_BACKOFF_S``,
doubling each time, up to ``ES_SCHED_MEDIA_CALLBACK_ATTEMPTS`` POSTs; then the task fails
retryable (the TaskDef's retries take over). Any other 4xx (or 3xx) fails it for good.

Output: ``{url, status, attempts, body_sha256}``.
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from email.message import Message
from urllib.parse import urlsplit

from es_sched.workers.media.files import canonical_json
from es_sched.workers.media.toolkit import JSON, Toolkit, text
from es_sched.workers.sdk import TaskCancelled, TaskContext, TaskFailure

SIGNATURE_HEADER = "X-Es-Sched-Signature"
DELIVERY_HEADER = "X-Es-Sched-Delivery"
TIMESTAMP_HEADER = "X-Es-Sched-Timestamp"
RETRY_STATUSES = frozenset({408, 429})
Post = Callable[[str, bytes, dict[str, str], float], int]
Headers = Callable[[], dict[str, str]]


def sign(body: bytes, secret: str, timestamp: str, delivery: str) -> str:
    signed = f"{timestamp}.{delivery}.".encode() + body
    return "sha256=" + hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()


def signed_headers(body: bytes, secret: str, delivery: str, now: float) -> dict[str, str]:
    """The headers of one POST of ``body``, signed at ``now``."""
    timestamp = str(int(now))
    return {
        "Content-Type": "application/json",
        "User-Agent": "es-sched-media-callback",
        TIMESTAMP_HEADER: timestamp,
        DELIVERY_HEADER: delivery,
        SIGNATURE_HEADER: sign(body, secret, timestamp, delivery),
    }


def verify(
    body: bytes,
    secret: str,
    received: tuple[str, str, str],
    now: float,
    max_age_s: float,
) -> bool:
    """A genuine and fresh POST, given its (timestamp, delivery, signature) headers: its HMAC
    recomputed and compared in constant time, its timestamp within ``max_age_s`` of ``now``.
    Refusing a delivery id already taken is the receiver's part (docs/security.md has one)."""
    timestamp, delivery, signature = received
    genuine = hmac.compare_digest(sign(body, secret, timestamp, delivery), signature)
    return genuine and timestamp.isdigit() and abs(now - int(timestamp)) <= max_age_s


def received(headers: Mapping[str, str] | Message) -> tuple[str, str, str]:
    """The signed headers of a request (a ``Message`` matches their names in any case)."""
    return (
        headers.get(TIMESTAMP_HEADER) or "",
        headers.get(DELIVERY_HEADER) or "",
        headers.get(SIGNATURE_HEADER) or "",
    )


def post(url: str, body: bytes, headers: dict[str, str], timeout_s: float) -> int:
    """One POST; returns the status (4xx/5xx included), raises OSError when nothing answered."""
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")  # noqa: S310
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:  # noqa: S310
            response.read()
            return int(response.status)
    except urllib.error.HTTPError as exc:
        exc.read()
        return int(exc.code)
    except http.client.HTTPException as exc:  # e.g. RemoteDisconnected: no answer either
        raise ConnectionError(str(exc)) from exc


def deliver(
    url: str,
    body: bytes,
    headers: Headers,
    attempts: int,
    backoff_s: float,
    timeout_s: float,
    cancel: threading.Event,
    send: Post = post,
) -> tuple[int, int]:
    """POST until a 2xx, a final answer or ``attempts``; returns (status, attempts used).
    ``headers`` is called for each POST: a retry is signed when it is sent, so a receiver's
    age check does not refuse it for the backoff it waited."""
    delay, last = backoff_s, ""
    for attempt in range(1, attempts + 1):
        try:
            status = send(url, body, headers(), timeout_s)
        except OSError as exc:  # refused, reset, DNS, timeout
            last = f"{type(exc).__name__}: {exc}"
        else:
            if 200 <= status < 300:
                return status, attempt
            if status < 500 and status not in RETRY_STATUSES:
                raise TaskFailure(f"callback {url} answered {status}", retryable=False)
            last = f"HTTP {status}"
        if attempt < attempts and cancel.wait(delay):
            raise TaskCancelled(f"callback to {url} cancelled")
        delay *= 2
    raise TaskFailure(f"callback {url} failed {attempts} times, last: {last}", retryable=True)


def callback(
    ctx: TaskContext, task: JSON, kit: Toolkit, clock: Callable[[], float] = time.time
) -> JSON:
    url = text(task, "url")
    if urlsplit(url).scheme not in ("http", "https") or not urlsplit(url).hostname:
        raise TaskFailure(f"input 'url' must be an http(s) URL, got {url!r}", retryable=False)
    s = kit.settings
    body = canonical_json(task.get("body"))
    status, attempts = deliver(
        url,
        body,
        lambda: signed_headers(body, s.callback_secret, ctx.task_id, clock()),
        s.callback_attempts,
        s.callback_backoff_s,
        s.callback_timeout_s,
        ctx.cancel_event,
    )
    return {
        "url": url,
        "status": status,
        "attempts": attempts,
        "body_sha256": hashlib.sha256(body).hexdigest(),
    }
