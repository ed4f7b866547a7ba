"""``es-sched audit check`` over a log real roles wrote: clean after a run, and each planted
corruption (an event written twice, an outcome accepted from a lease that was not live, a
read-model row that is not the fold of the log) reported with its invariant, workflow id and
offsets, exit 1.

What proves the corruption is there: the test produces it itself with a raw producer, after
the roles stopped, and reads it back (the events topic then holds the record it wrote)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from sqlalchemy import text

from es_sched.domain import commands as c
from es_sched.domain.events import Event, TaskCompleted
from es_sched.domain.ids import event_id
from es_sched.kafka.clients import producer
from es_sched.projections.postgres.store import engine_for
from es_sched.serialization import encode_event, encode_input
from testkit.cli import es_sched
from testkit.core import run_with_python_core
from testkit.kafka import read_to_end
from testkit.runtime import (
    MEDIA,
    Env,
    Worker,
    assert_log_invariants,
    completed,
    media_inputs,
    read_events,
    read_models_caught_up,
    roles,
)
from testkit.settings import kafka_connection
from testkit.wait import wait_until
from tests.integration.projection_harness import dropped_schemas

pytestmark = [pytest.mark.integration, pytest.mark.fault]
N = 12


CHANGED_RULE = """
import json
from es_sched import bootstrap
from es_sched.audit.check import check
from es_sched.audit.read import read_log
from es_sched.domain import task_inputs
from es_sched.domain.events import TaskCompleted
from es_sched.settings import load_settings

rule = task_inputs.report


def changed(st, inp):
    return [TaskCompleted(p.task_id, {**p.output, "changed": 1})
            if isinstance(p, TaskCompleted) else p for p in rule(st, inp)]


task_inputs.report = changed
drift = check(read_log(load_settings()), True, bootstrap.script_engine())
found = sorted({v.invariant for v in drift.violations})
print(json.dumps({"counts": drift.counts, "invariants": found}))
"""


def audit(env: Env, *extra: str) -> tuple[int, dict[str, Any]]:
    done = es_sched("audit", "check", "--prefix", env.prefix, "--json", *extra, env=env.vars)
    assert done.stdout, done.stderr
    return done.returncode, json.loads(done.stdout)


def test_a_clean_run_passes_and_planted_corruptions_fail() -> None:
    env = Env()
    env.create()
    env.push_files(*MEDIA)
    with roles(env, "decider"), Worker(env):
        ids = {s.workflow_id for s in env.submit("media_pipeline", media_inputs(N))}
        wait_until(lambda: completed(env) >= N, 180, f"{N} workflows completed")
    assert_log_invariants(env, ids)  # the same rules, in process
    code, report = audit(env, "--idle")
    assert (code, report["violations"]) == (0, []), report
    assert report["counts"]["workflows"] == N and report["counts"]["open"] == 0

    # I5 over this real log: a core rule changed after the fact decides it differently. In a
    # child with the Python core: a compiled core's callers do not see a replaced function.
    drift = json.loads(run_with_python_core(CHANGED_RULE, env.vars))
    assert drift["counts"]["I5"] > 0 and drift["invariants"] == ["I5"], drift

    by_wf = read_events(env)
    (dup_wf, dup_events), (lease_wf, lease_events) = sorted(by_wf.items())[:2]
    raw = producer(kafka_connection(env.bootstrap))
    # 1. An event written twice (I2).
    twice = dup_events[3]
    raw.produce(env.topics.events, key=dup_wf.encode(), value=encode_event(twice))
    # 2. An outcome accepted from a lease that was never live (I3): a forged report to
    #    task-results and a task.completed it caused, past the end of a finished history.
    done = next(e for e in reversed(lease_events) if isinstance(e.payload, TaskCompleted))
    task_id = done.payload.task_id  # type: ignore[attr-defined]
    forged = c.ReportCompleted(
        "forged-report",
        lease_wf,
        task_id=task_id,
        attempt=1,
        worker_id="intruder",
        lease_epoch=99,
        lease_token="stolen",
    )
    raw.produce(env.topics.task_results, key=lease_wf.encode(), value=encode_input(forged))
    last = lease_events[-1]
    seq = last.seq + 1
    outcome = TaskCompleted(task_id, {"x": 1})
    extra = Event(
        event_id(lease_wf, seq),
        lease_wf,
        seq,
        last.occurred_at,
        forged.input_id,
        last.correlation_id,
        outcome,
    )
    raw.produce(env.topics.events, key=lease_wf.encode(), value=encode_event(extra))
    assert raw.flush(30) == 0
    planted = [
        m
        for m in read_to_end(env.topics.events, "read_committed", bootstrap=env.bootstrap)
        if m.value() == encode_event(extra)
    ]
    assert len(planted) == 1  # the fault is in the log

    code, report = audit(env, "--idle")
    assert code == 1, report
    found = {(v["invariant"], v["workflow_id"]): v for v in report["violations"]}
    dup = found[("I2", dup_wf)]
    assert f"event {twice.event_id} ({twice.type}, seq 4) appears twice" in dup["message"]
    assert len(dup["offsets"]) == 2 and all(env.topics.events in o for o in dup["offsets"])
    fencing = [v for v in report["violations"] if v["invariant"] == "I3"]
    assert {v["workflow_id"] for v in fencing} == {lease_wf}
    messages = " | ".join(v["message"] for v in fencing)
    assert "has a second accepted outcome" in messages
    assert "from (worker, epoch, token, attempt) ('intruder', 99, 'stolen', 1)" in messages
    assert any(f"{env.topics.task_results}[" in o for v in fencing for o in v["offsets"])


def test_read_models_are_compared_when_caught_up_and_a_wrong_row_is_named() -> None:
    env = Env()
    env.create()
    env.push_files(*MEDIA)
    with dropped_schemas(env):
        with roles(env, "decider", "projector-pg", "projector-search"), Worker(env):
            env.submit("media_pipeline", media_inputs(6))
            wait_until(lambda: completed(env) >= 6, 180, "6 workflows completed")
            wait_until(lambda: read_models_caught_up(env), 120, "both read models caught up")
        code, report = audit(env, "--idle")
        assert (code, report["violations"]) == (0, []), report
        assert report["counts"]["I4_compared_pg"] == report["counts"]["I4_compared_search"] == 6
        victim = sorted(read_events(env))[2]
        engine = engine_for(env.settings)
        with engine.begin() as conn:
            conn.execute(
                text("UPDATE workflows SET status = 'FAILED' WHERE workflow_id = :w"),
                {"w": victim},
            )
        engine.dispose()
        code, report = audit(env, "--idle")
        assert code == 1, report
        [wrong] = report["violations"]
        assert (wrong["invariant"], wrong["workflow_id"]) == ("I4", victim)
        assert f"pg workflow {victim} status: log='COMPLETED' store='FAILED'" == wrong["message"]
        assert wrong["offsets"] and env.topics.events in wrong["offsets"][0]
