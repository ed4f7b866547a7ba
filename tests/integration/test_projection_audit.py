"""Auditors and operators against a live projection: replay --verify finds nothing on a healthy
projection and names the row a test corrupts; a rebuild from offset 0 equals the live rows and
the live projector keeps writing into the switched schema; status --after waits for a command
just submitted (read-your-writes)."""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial

import orjson
import pytest
from click.testing import CliRunner
from sqlalchemy import text

from es_sched import bootstrap
from es_sched.cli.main import cli
from es_sched.projections import replay as audit
from es_sched.projections.catch_up import catch_up
from es_sched.projections.postgres.store import PgStore, engine_for
from es_sched.projections.verified import Verified, replay_verified
from testkit.runtime import (
    MEDIA,
    Env,
    Role,
    Worker,
    final_status,
    media_inputs,
    read_events,
)
from testkit.wait import wait_until
from tests.integration.projection_harness import by_id, dropped_schemas, pg_rows, projected

pytestmark = pytest.mark.integration


def _all_completed(env: Env, n: int) -> bool:
    by_wf = read_events(env)
    return len(by_wf) == n and all(final_status(v) == "COMPLETED" for v in by_wf.values())


@pytest.fixture
def live(monkeypatch: pytest.MonkeyPatch) -> Iterator[Env]:
    """Decider, PostgreSQL projector and a worker double over 40 media workflows."""
    env = Env()
    env.create()
    env.push_files(*MEDIA)
    for key, value in env.vars.items():
        monkeypatch.setenv(key, value)
    with dropped_schemas(env):
        roles = [Role(env, "decider"), Role(env, "projector-pg")]
        try:
            for r in roles:
                r.wait_log("started", 90)
            with Worker(env):
                env.submit("media_pipeline", media_inputs(40))
                # every workflow finished and projected: nothing changes under the tests below
                wait_until(lambda: _all_completed(env, 40) and projected(env), 180, "40 projected")
                yield env
        finally:
            for r in roles:
                r.stop()


def _replay(*args: str) -> tuple[int, dict[str, object]]:
    result = CliRunner().invoke(cli, ["replay", "--verify", "--json", *args])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result.exit_code, orjson.loads(result.stdout)


def test_replay_verify_finds_nothing_then_names_the_corrupted_row(live: Env) -> None:
    code, report = _replay("--against", "pg", "--against", "changelog")
    assert (code, report["mismatches"], report["workflows"]) == (0, 0, 40)
    victim = sorted(w["workflow_id"] for w in pg_rows(live)[0])[7]
    engine = engine_for(live.settings)
    with engine.begin() as conn:
        conn.execute(
            text("UPDATE workflows SET status = 'FAILED' WHERE workflow_id = :w"), {"w": victim}
        )
    engine.dispose()
    code, report = _replay("--against", "pg")
    assert code == 1 and report["mismatches"] == 1
    mismatches = report["mismatch_list"]
    assert isinstance(mismatches, list) and len(mismatches) == 1
    m = mismatches[0]
    assert (m["id"], m["field"], m["log"], m["store"]) == (victim, "status", "COMPLETED", "FAILED")


def test_replay_without_verify_reports_the_fold_of_every_history(live: Env) -> None:
    """``es-sched replay`` folds in the groups' processes and gets figures back (ADR 43):
    they are the library fold's, and nothing is compared."""
    result = CliRunner().invoke(cli, ["replay", "--json"])
    assert result.exit_code == 0, result.output
    report = orjson.loads(result.stdout)
    one = audit.replay(live.settings, workers=1)
    assert (report["events"], report["refusals"], report["workflows"]) == (
        one.events,
        one.refusals,
        len(one.states),
    )
    assert report["statuses"] == {"COMPLETED": 40} and "mismatches" not in report


def test_a_replay_split_over_processes_folds_what_one_process_folds(live: Env) -> None:
    """Partition groups in forked workers (ADR 32) merge into the same fold as one reader."""
    one = audit.replay(live.settings, workers=1)
    split = audit.replay(live.settings, workers=3)
    assert (split.events, split.refusals, split.problems) == (one.events, one.refusals, [])
    assert split.states == one.states and split.last_at == one.last_at and len(one.states) == 40
    ids = audit.comparable_ids(split, None)
    stores = lambda t: bootstrap.store(live.settings, t)  # noqa: E731
    assert audit.verify_all(live.settings, split, ids, ("pg", "changelog"), stores, True) == []


def test_verifying_in_each_groups_process_finds_what_one_process_finds(live: Env) -> None:
    """ADR 43: partition groups fold and compare their own workflows in forked processes;
    figures and mismatches equal one process's, a corrupted row is named by both."""
    victim = sorted(w["workflow_id"] for w in pg_rows(live)[0])[3]
    engine = engine_for(live.settings)
    with engine.begin() as conn:
        conn.execute(
            text("UPDATE workflows SET priority = 99 WHERE workflow_id = :w"), {"w": victim}
        )
    try:
        stores, targets = partial(bootstrap.store, live.settings), ("pg", "changelog")
        one = replay_verified(live.settings, targets, stores, workers=1)
        split = replay_verified(live.settings, targets, stores, workers=3)
    finally:
        with engine.begin() as conn:
            conn.execute(
                text("UPDATE workflows SET priority = :p WHERE workflow_id = :w"),
                {"w": victim, "p": one_priority(live, victim)},
            )
        engine.dispose()
    assert _figures(split) == _figures(one) and one.workflows == 40
    assert sorted(split.mismatches(), key=_key) == sorted(one.mismatches(), key=_key)
    assert ("pg", "workflow", victim, "priority") in {_key(m) for m in split.mismatches()}


CORRUPT = "UPDATE workflows SET priority = 99 WHERE workflow_id = :w"


def _figures(v: Verified) -> tuple[object, ...]:
    return (v.events, v.refusals, v.workflows, v.compared, v.statuses)


def _key(m: audit.Mismatch) -> tuple[str, str, str, str]:
    return (m.source, m.kind, m.id, m.field)


def one_priority(live: Env, wf: str) -> int:
    """The priority the log gives ``wf`` (the fold's, which the row held before the test)."""
    state = audit.replay(live.settings, workflow_id=wf, workers=1).states[wf]
    return int(state.priority)


def test_partition_groups_in_processes_project_what_one_projector_does(live: Env) -> None:
    """``projections.catch_up`` over 3 forked workers (ADR 32) into a fresh schema: the rows
    and the archive equal the live projector's."""
    schema = f"{live.prefix}_groups"
    PgStore(live.settings, schema=schema).ensure()
    make = partial(PgStore, live.settings, schema=schema)
    read = catch_up(live.settings, make, f"{live.prefix}-groups", workers=3)
    want, have = pg_rows(live), pg_rows(live, schema)
    assert read >= want[2] > 0  # every archived event was read (refusals are not archived)
    assert by_id(have[0], "workflow_id") == by_id(want[0], "workflow_id")
    assert by_id(have[1], "task_id") == by_id(want[1], "task_id") and have[2] == want[2]


def test_a_rebuild_from_offset_zero_equals_the_live_projection(live: Env) -> None:
    before = pg_rows(live)
    result = CliRunner().invoke(cli, ["projections", "rebuild", "--target", "pg"])
    assert result.exit_code == 0, result.output
    after = pg_rows(live)
    assert by_id(after[0], "workflow_id") == by_id(before[0], "workflow_id")
    assert by_id(after[1], "task_id") == by_id(before[1], "task_id") and after[2] == before[2]
    # The live projector goes on writing into the switched schema.
    live.submit("media_pipeline", media_inputs(1, tag="more"))
    wait_until(lambda: projected(live) and len(pg_rows(live)[0]) == 41, 120, "the 41st")


def test_status_after_a_token_reads_its_own_write(live: Env) -> None:
    runner = CliRunner()
    sent = runner.invoke(
        cli,
        [
            "submit",
            "media_pipeline",
            "--json",
            "--input",
            '{"source_uri": "file:///ryw.mp4", "asset_id": "ryw", "callback_url": "http://cb"}',
        ],
    )
    assert sent.exit_code == 0, sent.output
    [row] = orjson.loads(sent.stdout)
    assert row["token"]
    shown = runner.invoke(cli, ["status", row["workflow_id"], "--after", row["token"], "--json"])
    assert shown.exit_code == 0, shown.output
    doc = orjson.loads(shown.stdout)
    assert doc["workflow"]["workflow_id"] == row["workflow_id"]
    assert doc["tasks"]  # the start and its first task were projected before the answer
    partition = int(row["token"].split(":")[0])
    assert doc["reflects"][str(partition)] > 0
