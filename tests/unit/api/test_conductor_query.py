"""Conductor's search query and sort, parsed into the read model's ``WorkflowFilter``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from es_sched.api.conductor.query import QueryError, parse_query, parse_sort
from es_sched.projections.postgres.queries import WorkflowFilter

MS = 1_700_000_000_000
AT = datetime.fromtimestamp(MS / 1000, UTC)


def test_blank_query_is_the_whole_read_model() -> None:
    assert parse_query(None) == WorkflowFilter()
    assert parse_query("   ") == WorkflowFilter()


def test_equality_in_and_ranges_combine_with_and() -> None:
    f = parse_query(
        'workflowType = "media.ingest" AND status IN (RUNNING, FAILED) AND version=2 '
        f"AND correlationId='order 7' AND startTime>{MS} AND startTime<{MS + 5000}"
    )
    assert f.names == ("media.ingest",)
    assert f.statuses == ("RUNNING", "FAILED")
    assert f.versions == (2,)
    assert f.correlation_ids == ("order 7",)
    assert f.created_from == AT + timedelta(milliseconds=1)  # Conductor's > is exclusive
    assert f.created_to == AT + timedelta(milliseconds=5000)


def test_terminated_also_finds_canceled_workflows() -> None:
    # A cancel reads as TERMINATED to Conductor's clients; searching for it must find it.
    assert parse_query("status=TERMINATED").statuses == ("TERMINATED", "CANCELED")


def test_workflow_ids_and_iso_times() -> None:
    f = parse_query('workflowId IN ("a", "b") AND updateTime > 2026-11-30T10:00:00Z')
    assert f.ids == ("a", "b")
    assert f.updated_from == datetime(2026, 11, 30, 10, 0, 0, 1000, UTC)


def test_two_conditions_on_one_field_must_both_hold() -> None:
    assert parse_query("status IN (RUNNING,FAILED) AND status=FAILED").statuses == ("FAILED",)
    disjoint = parse_query("status=RUNNING AND status=FAILED")
    assert disjoint.ids == ()  # no common value: no row, never "any"
    narrowed = parse_query(f"startTime>{MS} AND startTime>{MS + 10}")
    assert narrowed.created_from == AT + timedelta(milliseconds=11)


def test_keywords_are_case_insensitive_and_quotes_escape() -> None:
    f = parse_query(r'correlationId = "say \"hi\"" and workflowType in (x)')
    assert f.correlation_ids == ('say "hi"',)
    assert f.names == ("x",)


@pytest.mark.parametrize(
    ("query", "named"),
    [
        ("owner = bob", "unknown field 'owner'"),
        ("status = RUNNING OR status = FAILED", "only AND"),
        ("status != RUNNING", "operator '!='"),
        ("status = DONE", "unknown workflow status ['DONE']"),
        ("startTime = 5", "startTime does not take ="),
        ("workflowType > a", "workflowType does not take >"),
        ("version = two", "whole numbers"),
        ("startTime > yesterday", "epoch milliseconds or ISO 8601"),
        # Past what a datetime holds (a 500 until schemathesis sent one), or at its very edge
        ("startTime > 99999999999999999", "between 0001-01-02 and 9999-12-30"),
        ("updateTime < 9999-12-31T23:59:59.999999", "between 0001-01-02 and 9999-12-30"),
        ("startTime > 0001-01-01T00:00:00+05:00", "between"),
        ("status IN (RUNNING", "found the end of the query"),
        ("status IN RUNNING", "'(' after status IN"),
        ("status =", "found the end of the query"),
        ("(status = RUNNING)", "expected a field name"),
        ('status = "RUNNING', "cannot read"),
    ],
)
def test_what_cannot_be_honoured_is_refused_by_name(query: str, named: str) -> None:
    with pytest.raises(QueryError, match=None) as caught:
        parse_query(query)
    assert named in str(caught.value)


def test_sort() -> None:
    assert parse_sort(None) == [("created_at", True)]
    assert parse_sort("startTime:DESC") == [("created_at", True)]
    assert parse_sort("workflowType:asc,updateTime") == [("name", False), ("updated_at", False)]
    with pytest.raises(QueryError, match="unknown field 'owner'"):
        parse_sort("owner:DESC")
    with pytest.raises(QueryError, match="ASC or DESC"):
        parse_sort("startTime:UP")
