"""The PostgreSQL projection against the real log: rows equal the fold of the events topic,
a projector killed between its database commit and its Kafka commit converges (and counts the
records it skipped), and a stale batch changes nothing."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime

import pytest
from sqlalchemy import text

from es_sched.projections.postgres.store import PgStore, engine_for
from es_sched.projections.store import Batch, StoreUnavailable
from es_sched.projections.views import Rows, fold_rows
from testkit.golden import history
from testkit.runtime import (
    MEDIA,
    Env,
    Role,
    Worker,
    final_status,
    read_events,
)
from testkit.wait import wait_until
from tests.integration.doomed_projector import FAULT
from tests.integration.projection_harness import (
    by_id,
    dropped_schemas,
    pg_checkpoints,
    projected,
    submit_for,
)

pytestmark = pytest.mark.integration


def _media_env() -> Env:
    env = Env()
    env.create()
    env.push_files(*MEDIA)
    return env


@pytest.mark.fault
def test_killed_between_database_and_kafka_commits_it_converges_and_counts_skips() -> None:
    env = _media_env()
    with dropped_schemas(env):
        decider = Role(env, "decider")
        try:
            decider.wait_log("started", 90)
            with Worker(env):
                # events keep coming while projectors die one after another
                load = threading.Thread(target=submit_for, args=(env, 60.0), daemon=True)
                load.start()
                for n in range(4):  # each projector dies right after its 2nd database commit
                    doomed = Role(
                        env,
                        f"doomed-projector-{n}",
                        ["2"],
                        module="tests.integration.doomed_projector",
                    )
                    doomed.wait_log(f"{FAULT} 2", 90)  # the injected fault, not another death
                    assert doomed.proc.wait(30) == -signal.SIGKILL, doomed.text()[-3000:]
                load.join()
                wait_until(
                    lambda: all(final_status(v) == "COMPLETED" for v in read_events(env).values()),
                    240,
                    "every workflow completed",
                )
            survivor = Role(env, "projector-pg")
            try:
                wait_until(lambda: projected(env), 120, "convergence after the kills")
            finally:
                survivor.stop()
        finally:
            decider.stop()
        skipped = sum(int(c["duplicates_skipped"]) for c in pg_checkpoints(env))
        assert skipped > 0


def test_a_stale_batch_redelivered_after_a_newer_one_changes_nothing() -> None:
    env = Env()
    with dropped_schemas(env):
        store = PgStore(env.settings)
        store.ensure()
        events = history("media_480")
        old, new = fold_rows(events[:4]), fold_rows(events)
        assert old is not None and new is not None
        store.write("t", Batch(workflows={"w": new.workflow}, tasks=dict(new.tasks)))
        stale = Batch(workflows={"w": old.workflow}, tasks=dict(old.tasks), checkpoints={0: 5})
        store.write("t", stale)
        loaded = store.load([new.workflow["workflow_id"]])[new.workflow["workflow_id"]]
        assert loaded.workflow["version"] == new.workflow["version"] == len(events)
        assert by_id(list(loaded.tasks.values()), "task_id") == by_id(
            list(new.tasks.values()), "task_id"
        )
        assert store.checkpoints("t", [0, 1]) == {0: 5}
        store.write("t", replace(stale, checkpoints={0: 3}))  # offsets never go back
        assert store.checkpoints("t", [0]) == {0: 5}
        store.close()


@contextmanager
def _media_store() -> Iterator[tuple[Env, PgStore, Rows]]:
    """A store on a schema of its own (dropped afterwards) and the golden media history's
    rows."""
    env = Env()
    with dropped_schemas(env):
        store = PgStore(env.settings)
        store.ensure()
        rows = fold_rows(history("media_480"))
        assert rows is not None
        try:
            yield env, store, rows
        finally:
            store.close()


def test_loaded_times_are_in_the_zone_the_core_writes() -> None:
    """Sessions run with TimeZone=UTC (store.engine_for, as AsyncReads): loaded times come in
    ``datetime.UTC``, the zone of the fold's times, not the server's (``Etc/UTC`` as a
    ``ZoneInfo`` here), which made every comparison of a row with the fold slower."""
    with _media_store() as (_, store, rows):
        store.write("t", Batch(workflows={"w": rows.workflow}, tasks=dict(rows.tasks)))
        loaded = store.load([rows.workflow["workflow_id"]])[rows.workflow["workflow_id"]]
        times = [
            v
            for row in (loaded.workflow, *loaded.tasks.values())
            for v in row.values()
            if isinstance(v, datetime)
        ]
        assert len(times) >= 3 + len(loaded.tasks)  # created, updated, ended; each scheduled
        assert {t.tzinfo for t in times} == {UTC}
        assert loaded.workflow["created_at"] == rows.workflow["created_at"]


@pytest.mark.fault
def test_a_write_canceled_inside_its_copy_is_an_outage_and_leaves_nothing_half_written() -> None:
    """The rows go through the raw driver's COPY and INSERT (``_copy_upsert``), which
    SQLAlchemy does not wrap: a statement canceled there (an operator's ``pg_cancel_backend``,
    a role's ``statement_timeout``) must still be ``StoreUnavailable``, which pauses a projector
    and retries the batch, as the same cancel of any other statement of the write is."""
    with _media_store() as (env, store, rows):
        wf_id = rows.workflow["workflow_id"]
        store.write("t", Batch(workflows={wf_id: rows.workflow}, checkpoints={0: 1}))
        newer = Batch(
            workflows={wf_id: {**rows.workflow, "version": rows.workflow["version"] + 1}},
            checkpoints={0: 2},
        )
        admin = engine_for(env.settings, "public")
        raised: list[BaseException] = []

        def write() -> None:
            try:
                store.write("t", newer)
            except BaseException as exc:  # noqa: BLE001 - handed to the test's thread
                raised.append(exc)

        with admin.connect() as locker, locker.begin(), admin.connect() as watch:
            # The upsert into workflows waits behind this lock, inside the COPY path.
            locker.execute(text(f'LOCK TABLE "{store.schema}".workflows IN ACCESS EXCLUSIVE MODE'))
            writer = threading.Thread(target=write)
            writer.start()
            waiting = text(
                "SELECT pid FROM pg_locks WHERE relation = CAST(:t AS regclass) AND NOT granted"
            )
            table = {"t": f'"{store.schema}".workflows'}
            pids: list[int] = []

            def blocked() -> bool:
                pids.extend(watch.execute(waiting, table).scalars())
                return bool(pids)

            wait_until(blocked, 30, "the write's upsert waiting for the lock on workflows")
            pid = pids[0]
            # What proves the fault fired: PostgreSQL canceled that backend's statement.
            assert watch.execute(text("SELECT pg_cancel_backend(:p)"), {"p": pid}).scalar()
            writer.join(30)
        admin.dispose()
        assert not writer.is_alive()
        [exc] = raised
        assert isinstance(exc, StoreUnavailable), repr(exc)
        assert "canceling statement" in str(exc)
        # Nothing of the canceled batch was kept: the row and the checkpoint are the old ones.
        assert store.load([wf_id])[wf_id].workflow["version"] == rows.workflow["version"]
        assert store.checkpoints("t", [0]) == {0: 1}
        store.write("t", newer)  # the retry a projector makes
        assert store.load([wf_id])[wf_id].workflow["version"] == rows.workflow["version"] + 1
        assert store.checkpoints("t", [0]) == {0: 2}
