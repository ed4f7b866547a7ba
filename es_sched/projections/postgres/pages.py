"""Pages sized for the API at 100k rows (issue 14 item 6): a search page with its capped
total, the console's list with its capped counts per status.

Each is a few statements of one *shape* (which conditions its filter sets, its sort, the
statuses it counts) with bind parameters, and one request's values for them. A shape's
statements are built once (``_search_shape``, ``_console_shape``): building the SQLAlchemy
selects per request (the console list's are seven, six of them counts), with their cache keys
on top, was a large part of a search's and the console list's CPU (ADR 38).
``Statements.shape`` keys them,
so ``aio`` compiles each shape once too. The sync functions here run the same statements
through SQLAlchemy (the tests hold the asyncio answers equal to them).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

from sqlalchemy import Connection, Engine, ScalarSelect, Select, bindparam, func, select
from sqlalchemy import literal_column as column

from es_sched.projections.postgres.models import WORKFLOWS
from es_sched.projections.postgres.queries import (
    WorkflowFilter,
    filter_params,
    ordering,
    where,
)
from es_sched.projections.postgres.store import available
from es_sched.projections.views import Row

Sort = tuple[tuple[str, bool], ...]
NEWEST: Sort = (("created_at", True),)
SHAPES = 512  # statement shapes kept (each a few selects; filters x sorts x status lists)


@dataclass(frozen=True)
class Statements:
    """Statements of one shape and one request's values for their parameters."""

    shape: Hashable  # equal for statements built alike (``aio`` compiles a shape once)
    statements: tuple[Select[Any], ...]
    params: dict[str, Any]


@contextmanager
def snapshot(engine: Engine, what: str) -> Iterator[Connection]:
    """One connection, one REPEATABLE READ transaction: every query in it sees the same rows,
    so a count and the page it counts agree even while projectors write."""
    with available(what), engine.connect() as conn:
        conn.execution_options(isolation_level="REPEATABLE READ")
        with conn.begin():
            yield conn


def _capped_count(fields: Sequence[str], suffix: str = "") -> ScalarSelect[Any]:
    """How many rows match the conditions on ``fields``, counting at most ``:counted`` (one
    past the cap: "more than")."""
    matching = where(select(column("1")).select_from(WORKFLOWS), fields, suffix)
    return (
        select(func.count())
        .select_from(matching.limit(bindparam("counted")).subquery())
        .scalar_subquery()
    )


def _page(fields: Sequence[str], sort: Sort, columns: Sequence[Any] = (WORKFLOWS,)) -> Select[Any]:
    """The rows matching ``fields``' conditions in ``sort`` order (ties broken by workflow id,
    so pages never overlap), ``:size`` of them from ``:start``."""
    query = where(select(*columns), fields).order_by(*ordering(sort))
    return query.offset(bindparam("start")).limit(bindparam("size"))


def _bounds(start: int, size: int, cap: int) -> dict[str, int]:
    return {"start": start, "size": size, "counted": start + cap + 1}


@lru_cache(maxsize=SHAPES)
def _search_shape(fields: tuple[str, ...], sort: Sort) -> tuple[Select[Any], ...]:
    return select(_capped_count(fields)), _page(fields, sort)


def search_statements(
    f: WorkflowFilter, start: int, size: int, sort: Sequence[tuple[str, bool]], cap: int
) -> Statements:
    """``search_page``'s two statements: its capped count and its page."""
    params = filter_params(f)
    shape = ("search", tuple(params), tuple(sort))
    return Statements(shape, _search_shape(*shape[1:]), params | _bounds(start, size, cap))


def capped(total: int, start: int, cap: int) -> tuple[int, bool]:
    """A count made by ``_capped_count``: (at most ``start + cap``, whether it stopped there)."""
    return min(total, start + cap), total > start + cap


def search_page(
    engine: Engine,
    f: WorkflowFilter,
    start: int,
    size: int,
    sort: Sequence[tuple[str, bool]],
    cap: int,
) -> tuple[int, bool, list[Row]]:
    """One page of rows matching ``f`` with a bounded total: (total, capped, rows). The total
    counts at most ``start + cap`` rows (an exact count scans every match: 58k rows for one
    status at 100k workflows); ``capped`` says there are more. Count and page share one
    snapshot."""
    found = search_statements(f, start, size, sort, cap)
    count, page = found.statements
    with snapshot(engine, "search") as conn:
        total = int(conn.execute(count, found.params).scalar_one())
        rows = [dict(r) for r in conn.execute(page, found.params).mappings()]
    return *capped(total, start, cap), rows


# The console's list shows every column but the JSON documents (a media workflow's input can
# be kilobytes, decoded for nothing).
LISTED = tuple(c for c in WORKFLOWS.c if c.name not in ("input", "output"))


@lru_cache(maxsize=SHAPES)
def _console_shape(
    fields: tuple[str, ...], others: tuple[str, ...], statuses: int
) -> tuple[Select[Any], ...]:
    counts = (_capped_count((*others, "statuses"), f"_{i}") for i in range(statuses))
    return select(*counts), _page(fields, NEWEST, LISTED)


def console_statements(
    f: WorkflowFilter, statuses: Sequence[str], start: int, size: int, cap: int
) -> Statements:
    """``console_page``'s two statements: one row of a capped count per status in
    ``statuses`` (over ``f`` without its statuses), and the page of ``f``'s rows."""
    page = filter_params(f)
    others = replace(f, statuses=())
    params = page | _bounds(start, size, cap)
    for i, status in enumerate(statuses):
        params |= filter_params(replace(others, statuses=(status,)), f"_{i}")
    key = (tuple(page), tuple(filter_params(others)), len(statuses))
    return Statements(("console", *key), _console_shape(*key), params)


def console_counts(
    statuses: Sequence[str], found: Sequence[int], start: int, cap: int
) -> tuple[dict[str, int], frozenset[str]]:
    """The counts per status a ``console_statements`` count row holds, and the statuses whose
    count stopped at ``start + cap``."""
    seen = {s: capped(int(n), start, cap) for s, n in zip(statuses, found, strict=True) if n}
    return {s: n for s, (n, _) in seen.items()}, frozenset(s for s, (_, c) in seen.items() if c)


def console_page(
    engine: Engine,
    f: WorkflowFilter,
    statuses: Sequence[str],
    start: int,
    size: int,
    cap: int,
) -> tuple[dict[str, int], frozenset[str], list[Row]]:
    """The console's list: rows matching ``f`` per status in ``statuses`` (over ``f`` without
    its statuses, each counted to at most ``start + cap``: one index range per status, not a
    scan of the table), the statuses whose count stopped there, and one page of ``f``'s rows
    (``LISTED`` columns), newest first; all in one snapshot, so the counts and the page
    agree."""
    found = console_statements(f, statuses, start, size, cap)
    counted, page = found.statements
    with snapshot(engine, "count") as conn:
        counts = conn.execute(counted, found.params).one() if statuses else ()
        rows = [dict(r) for r in conn.execute(page, found.params).mappings()]
    return *console_counts(statuses, counts, start, cap), rows
