"""The gateway store's per-task statements on a real PostgreSQL (ADR 24, ADR 36).

``handed`` and ``end`` run on the store's own autocommit psycopg connections (``conns``),
without a pre-ping: a connection the server dropped fails its statement, which runs once more
on a new connection. The fault here is ``pg_terminate_backend`` on every connection the store
keeps; what proves it fired is that the backends the store held are gone from
``pg_stat_activity`` and the next statement ran on a backend that was not one of them.
"""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from sqlalchemy import text

from es_sched.api.gateway.store import GatewayStore
from es_sched.serialization import wire
from testkit.pg import terminate_backends
from testkit.settings import settings_with, unique_name

pytestmark = [pytest.mark.integration, pytest.mark.fault]


@pytest.fixture
def store() -> Iterator[GatewayStore]:
    settings = settings_with({"ES_SCHED_PG_SCHEMA_NAME": unique_name()})
    found = GatewayStore(settings)
    yield found
    found.close()
    with psycopg.connect(settings.postgres.libpq_dsn, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{found.schema}" CASCADE')


def _task(n: int, epoch: int = 1) -> wire.Assignment:
    return wire.Assignment("gw", f"wf{n}", f"t{n}", "transcode", 1, epoch, f"tok{n}", "", {})


def _backends(store: GatewayStore) -> set[int]:
    return {conn.info.backend_pid for conn in store._hot._idle}


def test_a_poll_hands_its_tasks_and_the_first_outcome_is_kept(store: GatewayStore) -> None:
    store.handed("gw", "w1", [_task(1), _task(2)])
    lease = store.lease("t1")
    assert lease is not None and (lease.http_worker_id, lease.lease_token) == ("w1", "tok1")
    first, outcome = store.end("t1", "wf1", "w1", "COMPLETED")
    assert first is not None and first.ended is None and outcome == "COMPLETED"
    again, outcome = store.end("t1", "wf1", "w1", "COMPLETED")  # the SDK's retry
    assert again is not None and again.ended == "COMPLETED" and outcome == "COMPLETED"
    _, outcome = store.end("t1", "wf1", "w1", "FAILED")  # another outcome: the first stays
    assert outcome == "COMPLETED"
    other, outcome = store.end("t2", "wf2", "w2", "COMPLETED")  # not the caller's lease
    assert other is not None and other.http_worker_id == "w1" and outcome is None
    assert store.end("t9", "wf9", "w1", "COMPLETED") == (None, None)
    store.handed("gw", "w3", [_task(1, epoch=2)])  # polled again: a fresh lease, not ended
    lease = store.lease("t1")
    assert lease is not None and (lease.lease_epoch, lease.ended, lease.http_worker_id) == (
        2,
        None,
        "w3",
    )
    assert store.ended_of("gw", ["t1", "t2"]) == set()


def test_an_update_on_a_connection_the_server_dropped_runs_again_on_a_new_one(
    store: GatewayStore,
) -> None:
    store.handed("gw", "w1", [_task(1), _task(2)])
    held = _backends(store)
    assert held, "the store keeps its connection between statements"
    alive = terminate_backends(store._hot._dsn, held)
    assert alive == 0, "the fault fired: the store's backends are gone"
    lease, outcome = store.end("t1", "wf1", "w1", "COMPLETED")
    assert lease is not None and outcome == "COMPLETED"
    assert _backends(store).isdisjoint(held)  # it ran on a new connection
    # Invariants: the outcome is recorded once, the other lease is untouched.
    _, again = store.end("t1", "wf1", "w1", "FAILED")
    assert again == "COMPLETED"
    other = store.lease("t2")
    assert other is not None and other.ended is None


def test_lines_kept_while_a_task_runs_go_with_its_lease_row(store: GatewayStore) -> None:
    """ADR 60: lines are read back in order, and pruned with the ended lease row only."""
    store.handed("gw", "w1", [_task(1), _task(2)])
    store.add_logs("t1", [{"at": "2026-12-07T06:00:00Z", "log": "one"}])
    store.add_logs("t1", [{"at": "2026-12-07T06:00:01Z", "log": "two"}])
    store.add_logs("t2", [{"at": "2026-12-07T06:00:02Z", "log": "other"}])
    assert [x["log"] for x in store.logs("t1")] == ["one", "two"]
    assert store.logs("t1")[0] == {"at": "2026-12-07T06:00:00Z", "log": "one"}
    store.end("t1", "wf1", "w1", "COMPLETED")
    with store.engine.begin() as conn:  # ended over an hour ago
        conn.execute(
            text("UPDATE leases SET ended_at = now() - interval '2 hours' WHERE task_id = 't1'")
        )
    store.ended_of("gw", [])
    assert store.lease("t1") is None and store.logs("t1") == []
    assert [x["log"] for x in store.logs("t2")] == ["other"], "a running task's lines stay"
