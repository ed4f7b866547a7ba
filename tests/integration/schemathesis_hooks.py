"""Schemathesis checks of ours, loaded by ``st run`` through ``SCHEMATHESIS_HOOKS`` (the
schema test): every 4xx says why, in a JSON body."""

from __future__ import annotations

import json
from typing import Any

import schemathesis


@schemathesis.check
def reason_on_4xx(ctx: Any, response: Any, case: Any) -> bool | None:
    """A 4xx carries a JSON object with a non-empty reason: Conductor's ``message`` (every
    route), or the token protocol's ``error`` (a 401, ADR 25)."""
    if not 400 <= response.status_code < 500:
        return None
    try:
        body = json.loads(response.content or b"null")
    except ValueError:
        raise AssertionError(f"{response.status_code} without a JSON body") from None
    if not isinstance(body, dict):
        raise AssertionError(f"{response.status_code} body is not a JSON object: {body!r:.200}")
    reason = body.get("error") if response.status_code == 401 else body.get("message")
    if not (isinstance(reason, str) and reason.strip()):
        field = "error" if response.status_code == 401 else "message"
        raise AssertionError(f"{response.status_code} without a {field}: {body!r:.200}")
    return True
