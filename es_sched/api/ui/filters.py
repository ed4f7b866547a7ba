"""The workflows list's filter: URL query parameters <-> ``queries.WorkflowFilter``.

The filter lives in the URL (``?name=a&status=FAILED&status=TIMED_OUT&from=...``) so a view is
a link an operator can share; the bulk actions post the same query string back, so "everything
matching the filter" is the very filter the page showed. A malformed value is a 400 naming the
parameter, never a 500.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

from starlette.datastructures import ImmutableMultiDict

from es_sched.api.errors import ApiError
from es_sched.projections.postgres.queries import WorkflowFilter

STATUSES = ("RUNNING", "PAUSED", "COMPLETED", "FAILED", "TIMED_OUT", "TERMINATED", "CANCELED")
FIELDS = ("name", "version", "status", "tenant", "correlation_id", "from", "to", "q")
PAGE_SIZES = (25, 50, 100, 200)
FREE_TEXT_MAX = 1000  # ids the search store may return for one free-text query


@dataclass(frozen=True)
class ListQuery:
    """What the form holds (strings, as typed) plus the page."""

    values: dict[str, list[str]]
    start: int = 0
    size: int = 50

    def one(self, key: str) -> str:
        return (self.values.get(key) or [""])[0]

    def many(self, key: str) -> list[str]:
        return self.values.get(key, [])

    def url(self, **changes: object) -> str:
        """This query's link, with ``changes`` (a list value replaces, None removes)."""
        pairs: list[tuple[str, str]] = []
        merged: dict[str, object] = {**self.values, "start": self.start, "size": self.size}
        merged.update(changes)
        for key, value in merged.items():
            if value is None or value in ("", []):
                continue
            for v in value if isinstance(value, list) else [value]:
                if v != "":
                    pairs.append((key, str(v)))
        return "?" + urlencode(pairs)

    @property
    def filter_only(self) -> str:
        """The filter's query string without paging (what a bulk action re-reads)."""
        return self.url(start=None, size=None)[1:]


def parse(params: ImmutableMultiDict[str, Any]) -> ListQuery:
    """The query string (or a posted form carrying it) as a ``ListQuery``."""
    values = {k: [str(v).strip() for v in params.getlist(k) if str(v).strip()] for k in FIELDS}
    values = {k: v for k, v in values.items() if v}
    size = _int(str(params.get("size") or "50"), "size")
    start = _int(str(params.get("start") or "0"), "start")
    if size not in PAGE_SIZES:
        raise ApiError(400, f"size must be one of {list(PAGE_SIZES)}, not {size}")
    if start < 0:
        raise ApiError(400, "start must be 0 or more")
    for status in values.get("status", []):
        if status not in STATUSES:
            raise ApiError(400, f"unknown status {status!r}; choose from {list(STATUSES)}")
    return ListQuery(values, start, size)


def to_filter(q: ListQuery, ids: tuple[str, ...] | None = None) -> WorkflowFilter:
    """The rows ``q`` asks for; ``ids`` is what the free text matched (None: no free text)."""
    return WorkflowFilter(
        names=tuple(q.many("name")),
        versions=tuple(_int(v, "version") for v in q.many("version")),
        statuses=tuple(q.many("status")),
        tenants=tuple(q.many("tenant")),
        correlation_ids=tuple(q.many("correlation_id")),
        ids=ids,
        created_from=_time(q.one("from"), "from"),
        created_to=_time(q.one("to"), "to"),
    )


def without_status(f: WorkflowFilter) -> WorkflowFilter:
    """The counts per status are over the rest of the filter, so each is a link to narrow to."""
    return replace(f, statuses=())


def _int(text: str, name: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ApiError(400, f"{name} must be an integer, not {text!r}") from None


def _time(text: str, name: str) -> datetime | None:
    if not text:
        return None
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise ApiError(400, f"{name} must be a date and time (ISO 8601), not {text!r}") from None
    return value if value.tzinfo else value.replace(tzinfo=UTC)
