"""Conductor's workflow search query and sort, parsed into ``queries.WorkflowFilter``.

Grammar (the subset Conductor's UI and SDKs send; Conductor's own parser accepts more)::

    query     := condition ("AND" condition)*
    condition := FIELD ("=" | ">" | "<") value | FIELD "IN" "(" value ("," value)* ")"
    value     := WORD | "quoted" | 'quoted'

Fields: ``workflowType``, ``version``, ``status``, ``correlationId``, ``workflowId``,
``parentWorkflowId`` take ``=`` and ``IN``; ``startTime`` and ``updateTime`` take ``>`` and
``<`` (epoch milliseconds, or ISO 8601), both exclusive as in Conductor. Two conditions on one
field must both hold (sets intersect, ranges narrow). Anything else (``OR``, parentheses, an
unknown field or operator) raises ``QueryError`` naming the problem, which the route answers
400: a query es-sched cannot honour is refused, never silently widened.
"""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from es_sched.errors import EsSchedError
from es_sched.projections.postgres.queries import WorkflowFilter

WORKFLOW_STATUSES = frozenset(
    {"RUNNING", "PAUSED", "COMPLETED", "FAILED", "TIMED_OUT", "TERMINATED", "CANCELED"}
)
# Conductor field -> WorkflowFilter attribute, for fields that take = and IN.
SET_FIELDS = {
    "workflowType": "names",
    "version": "versions",
    "status": "statuses",
    "correlationId": "correlation_ids",
    "workflowId": "ids",
    "parentWorkflowId": "parent_workflow_id",
}
# Conductor field -> (inclusive low, exclusive high) attributes, for fields that take > and <.
RANGE_FIELDS = {
    "startTime": ("created_from", "created_to"),
    "updateTime": ("updated_from", "updated_to"),
}
# Conductor's sort fields -> read-model columns.
SORT_FIELDS = {
    "startTime": "created_at",
    "createTime": "created_at",
    "updateTime": "updated_at",
    "endTime": "ended_at",
    "workflowType": "name",
    "status": "status",
    "priority": "priority",
    "workflowId": "workflow_id",
}
ONE_MS = timedelta(milliseconds=1)

_TOKEN = re.compile(
    r"""\s*(?:
        (?P<quoted>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')
      | (?P<op>!=|>=|<=|=|>|<|\(|\)|,)
      | (?P<word>[^\s=<>!(),"']+)
    )""",
    re.VERBOSE,
)


class QueryError(EsSchedError):
    """A search query or sort es-sched cannot honour; the message names the problem."""


def _tokens(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos = 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        match = _TOKEN.match(text, pos)
        if match is None or match.end() == pos:
            raise QueryError(f"query: cannot read {text[pos:].strip()[:20]!r} at {pos}")
        kind = match.lastgroup or "word"
        value = match.group(kind)
        if kind == "quoted":
            value = re.sub(r"\\(.)", r"\1", value[1:-1])
        out.append((kind, value))
        pos = match.end()
    return out


def parse_query(text: str | None, base: WorkflowFilter | None = None) -> WorkflowFilter:
    """``base`` narrowed by every condition of ``text`` (``None`` or blank: ``base`` itself)."""
    f = base or WorkflowFilter()
    tokens = _tokens(text or "")
    i = 0

    def take(what: str) -> tuple[str, str]:
        nonlocal i
        if i >= len(tokens):
            raise QueryError(f"query: expected {what}, found the end of the query")
        token = tokens[i]
        i += 1
        return token

    while i < len(tokens):
        if i > 0:
            kind, word = take("AND")
            if kind != "word" or word.upper() != "AND":
                hint = " (only AND is supported)" if word.upper() == "OR" else ""
                raise QueryError(f"query: expected AND between conditions, found {word!r}{hint}")
        kind, field = take("a field name")
        if kind != "word":
            raise QueryError(f"query: expected a field name, found {field!r}")
        kind, op = take(f"an operator after {field!r}")
        if kind == "word" and op.upper() == "IN":
            take_open = take("'(' after IN")
            if take_open != ("op", "("):
                raise QueryError(f"query: expected '(' after {field} IN")
            values: list[str] = []
            while True:
                kind, value = take("a value in IN (...)")
                if kind == "op":
                    raise QueryError(
                        f"query: expected a value in {field} IN (...), found {value!r}"
                    )
                values.append(value)
                kind, sep = take("',' or ')'")
                if sep == ")":
                    break
                if sep != ",":
                    raise QueryError(f"query: expected ',' or ')' in {field} IN (...)")
            f = _narrow_set(f, field, values)
            continue
        if kind != "op" or op not in ("=", ">", "<"):
            raise QueryError(
                f"query: operator {op!r} after {field!r} is not supported; use =, >, < or IN"
            )
        kind, value = take(f"a value after {field} {op}")
        if kind == "op":
            raise QueryError(f"query: expected a value after {field} {op}, found {value!r}")
        f = _narrow_set(f, field, [value]) if op == "=" else _narrow_range(f, field, op, value)
    return f


def _narrow_set(f: WorkflowFilter, field: str, values: list[str]) -> WorkflowFilter:
    attr = SET_FIELDS.get(field)
    if attr is None:
        raise QueryError(_unknown(field, "=" if len(values) == 1 else "IN"))
    typed: tuple[Any, ...] = tuple(values)
    if attr == "versions":
        if not all(v.isdigit() for v in values):
            raise QueryError(f"query: version takes whole numbers, not {values}")
        typed = tuple(int(v) for v in values)
    if attr == "statuses":
        unknown = sorted(set(values) - WORKFLOW_STATUSES)
        if unknown:
            raise QueryError(
                f"query: unknown workflow status {unknown}; one of {sorted(WORKFLOW_STATUSES)}"
            )
        # A cancel reads as TERMINATED to Conductor's clients (``models``): find it as one.
        typed = tuple(dict.fromkeys(s for v in values for s in _as_statuses(v)))
    if attr == "parent_workflow_id":
        if len(values) != 1:
            raise QueryError("query: parentWorkflowId takes = with one value, not IN")
        if f.parent_workflow_id not in (None, values[0]):
            return replace(f, ids=())
        return replace(f, parent_workflow_id=values[0])
    current = getattr(f, attr)
    if (current is None) if attr == "ids" else not current:
        return _with(f, attr, typed)
    both = tuple(v for v in current if v in typed)
    # An empty set means "any" on these fields: no common value means no row at all.
    return _with(f, attr, both) if both else replace(f, ids=())


def _with(f: WorkflowFilter, attr: str, value: Any) -> WorkflowFilter:
    changes: dict[str, Any] = {attr: value}
    return replace(f, **changes)


def _as_statuses(status: str) -> tuple[str, ...]:
    return (status, "CANCELED") if status == "TERMINATED" else (status,)


def _narrow_range(f: WorkflowFilter, field: str, op: str, value: str) -> WorkflowFilter:
    attrs = RANGE_FIELDS.get(field)
    if attrs is None:
        raise QueryError(_unknown(field, op))
    when = _instant(field, value)
    low_attr, high_attr = attrs
    if op == ">":
        low = when + ONE_MS  # Conductor's > is exclusive; the filter's low bound is inclusive
        current = getattr(f, low_attr)
        return _with(f, low_attr, low if current is None else max(current, low))
    current = getattr(f, high_attr)
    return _with(f, high_attr, when if current is None else min(current, when))


EARLIEST = datetime.min.replace(tzinfo=UTC) + timedelta(days=1)  # room for offsets and
LATEST = datetime.max.replace(tzinfo=UTC) - timedelta(days=1)  # ONE_MS either side


def _instant(field: str, value: str) -> datetime:
    try:
        if value.lstrip("-").isdigit():
            parsed = datetime.fromtimestamp(int(value) / 1000, UTC)
        else:
            parsed = datetime.fromisoformat(value)
            parsed = parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
        if EARLIEST <= parsed <= LATEST:
            return parsed
    except (ValueError, OverflowError, OSError):  # not a time, or past what a datetime holds
        pass
    raise QueryError(
        f"query: {field} takes epoch milliseconds or ISO 8601 between "
        f"{EARLIEST.date().isoformat()} and {LATEST.date().isoformat()}, not {value!r}"
    )


def _unknown(field: str, op: str) -> str:
    if field in SET_FIELDS or field in RANGE_FIELDS:
        usable = "= and IN" if field in SET_FIELDS else "> and <"
        return f"query: {field} does not take {op}; it takes {usable}"
    known = sorted({*SET_FIELDS, *RANGE_FIELDS})
    return f"query: unknown field {field!r}; searchable fields are {known}"


def parse_sort(text: str | None) -> list[tuple[str, bool]]:
    """Conductor's ``sort`` (``startTime:DESC``, several joined by ``,`` or ``;``) as
    (column, descending) pairs; none given: newest first."""
    if not text or not text.strip():
        return [("created_at", True)]
    out: list[tuple[str, bool]] = []
    for part in re.split(r"[,;]", text):
        field, _, direction = part.strip().partition(":")
        column = SORT_FIELDS.get(field)
        if column is None:
            raise QueryError(f"sort: unknown field {field!r}; one of {sorted(SORT_FIELDS)}")
        direction = (direction or "ASC").upper()
        if direction not in ("ASC", "DESC"):
            raise QueryError(f"sort: direction {direction!r} of {field} is ASC or DESC")
        out.append((column, direction == "DESC"))
    return out
