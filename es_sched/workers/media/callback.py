"""``media.callback``: POST a JSON body to the caller's URL, signed, retried with backoff.

Input: ``url`` (http or https) and ``body`` (any JSON value). The request body is the
canonical JSON of ``body`` (sorted keys, no spaces, UTF-8) and carries
``X-Es-Sched-Signature: sha256=<hex HMAC-SHA256 of those bytes>`` keyed with
``ES_SCHED_MEDIA_CALLBACK_SECRET``, and ``X-Es-Sched-Delivery: <task id>`` so the receiver
can drop duplicates (delivery is at least once). Within one task attempt, connection errors,
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
import urllib.error
import urllib.request
from collections.abc import Callable
from urllib.parse import urlsplit

from es_sched.workers.media.files import canonical_json
from es_sched.workers.media.toolkit import JSON, Toolkit, text
from es_sched.workers.sdk import TaskCancelled, TaskContext, TaskFailure

SIGNATURE_HEADER = "X-Es-Sched-Signature"
DELIVERY_HEADER = "X-Es-Sched-Delivery"
RETRY_STATUSES = frozenset({408, 429})
Post = Callable[[str, bytes, dict[str, str], float], int]


def sign(body: bytes, secret: str) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def verify(body: bytes, secret: str, header: str | None) -> bool:
    """What a receiver does: recompute the HMAC and compare in constant time."""
    return header is not None and hmac.compare_digest(sign(body, secret), header)


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
    headers: dict[str, str],
    attempts: int,
    backoff_s: float,
    timeout_s: float,
    cancel: threading.Event,
    send: Post = post,
) -> tuple[int, int]:
    """POST until a 2xx, a final answer or ``attempts``; returns (status, attempts used)."""
    delay, last = backoff_s, ""
    for attempt in range(1, attempts + 1):
        try:
            status = send(url, body, headers, timeout_s)
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


def callback(ctx: TaskContext, task: JSON, kit: Toolkit) -> JSON:
    url = text(task, "url")
    if urlsplit(url).scheme not in ("http", "https") or not urlsplit(url).hostname:
        raise TaskFailure(f"input 'url' must be an http(s) URL, got {url!r}", retryable=False)
    s = kit.settings
    body = canonical_json(task.get("body"))
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "es-sched-media-callback",
        SIGNATURE_HEADER: sign(body, s.callback_secret),
        DELIVERY_HEADER: ctx.task_id,
    }
    status, attempts = deliver(
        url,
        body,
        headers,
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
