"""Refusals are events (issue 12 item 6, ADR 11), with a real decider and real projectors.

An upstream service produces StartWorkflow commands straight to the commands topic: one without
a definition for a name nobody registered, one embedding a definition that fails validation.
Each is answered by ``workflow.rejected`` under its workflow id, with the reason and the
command's origin; neither is dead-lettered (proved by a sentinel produced after each, on the
same key so the same partition: the sentinels' dead letters arrive and are the only ones). The
projectors take the refusals (PostgreSQL keeps them in ``rejections``), and ``es-sched replay
--verify`` finds the read models equal to the log.

``es-sched cancel|resume ... --wait`` runs as a user runs it: a control command for an unknown
workflow exits 1 with the reason, as does one the workflow's state forbids; an accepted cancel
exits 0 printing what happened; with no decider to answer, the wait ends with exit 3.
"""

from __future__ import annotations

import json
import time
import uuid
from functools import partial
from typing import Any

import pytest
from sqlalchemy import select

from es_sched.domain import commands as c
from es_sched.domain.events import Event, WorkflowRejected
from es_sched.domain.ids import workflow_id_for_command
from es_sched.kafka.clients import producer
from es_sched.projections.postgres.models import REJECTIONS
from es_sched.projections.postgres.store import PgStore, engine_for
from es_sched.projections.search.store import SearchStore
from es_sched.projections.store import Store
from es_sched.serialization import encode_input
from testkit.cli import es_sched
from testkit.kafka import read_to_end
from testkit.runtime import Env, assert_log_invariants, read_events, roles
from testkit.settings import kafka_connection
from testkit.wait import wait_until
from tests.integration.projection_harness import dropped_schemas, projected

pytestmark = pytest.mark.integration

HOLD = {  # one WAIT task: the workflow runs until it is signalled or canceled
    "name": "refuse_hold",
    "version": 1,
    "tasks": [{"name": "hold", "taskReferenceName": "hold", "type": "WAIT"}],
}
BROKEN = {
    "name": "refuse_broken",
    "version": 1,
    "tasks": [
        {"name": "a", "taskReferenceName": "a", "type": "SIMPLE"},
        {"name": "b", "taskReferenceName": "a", "type": "SIMPLE"},
        {"name": "j", "taskReferenceName": "j", "type": "JOIN", "joinOn": ["a"]},
    ],
}


def upstream_start(
    env: Env, command_id: str, name: str, definition: dict[str, Any] | None
) -> c.StartWorkflow:
    """A StartWorkflow as a service produces it, bypassing es-sched's client and its checks."""
    start = c.StartWorkflow(
        command_id,
        workflow_id_for_command(command_id),
        name=name,
        version=None,
        input={"asset": command_id},
        correlation_id=f"corr-{command_id}",
        definition=definition,
    )
    env.send([start], env.topics.commands)
    return start


def rejection(env: Env, workflow_id: str) -> Event | None:
    found = [e for e in read_events(env).get(workflow_id, []) if e.type == "workflow.rejected"]
    return found[0] if found else None


def caught_up(env: Env, store: Store) -> bool:
    """The store's checkpoints are past the last event of every partition."""
    want: dict[int, int] = {}
    for msg in read_to_end(env.topics.events):
        want[msg.partition() or 0] = max(want.get(msg.partition() or 0, 0), (msg.offset() or 0) + 1)
    have = store.checkpoints(env.topics.events, sorted(want))
    return all(have.get(p, 0) >= o for p, o in want.items())


def test_starts_that_cannot_start_are_answered_by_workflow_rejected_not_dead_letters() -> None:
    env = Env()
    env.create()
    env.push(HOLD, [])
    with dropped_schemas(env), roles(env, "decider", "projector-pg", "projector-search"):
        unknown = upstream_start(env, f"ingest-{uuid.uuid4().hex}", "refuse_nobody_pushed", None)
        invalid = upstream_start(env, f"ingest-{uuid.uuid4().hex}", "refuse_broken", BROKEN)
        # Sentinels after each, on its partition: an undecodable record and a wrong key.
        p = producer(kafka_connection(env.bootstrap))
        p.produce(env.topics.commands, key=unknown.workflow_id.encode(), value=b"\xff sentinel")
        wrong_key = c.CancelWorkflow("sentinel-cancel", "some-other-workflow")
        p.produce(
            env.topics.commands, key=invalid.workflow_id.encode(), value=encode_input(wrong_key)
        )
        assert p.flush(30) == 0
        [ok] = env.submit("refuse_hold", [{}])  # a workflow with a history beside them

        wait_until(
            lambda: all(rejection(env, s.workflow_id) for s in (unknown, invalid)),
            60,
            "both refusals on the events topic",
        )
        wait_until(lambda: len(read_to_end(env.topics.dead_letters)) >= 2, 60, "the sentinels")
        dead = {m.value() for m in read_to_end(env.topics.dead_letters)}
        assert dead == {b"\xff sentinel", encode_input(wrong_key)}, "only the sentinels"

        first = rejection(env, unknown.workflow_id)
        assert first is not None and isinstance(first.payload, WorkflowRejected)
        assert (first.seq, first.causation_id, first.correlation_id) == (
            0,
            unknown.input_id,
            unknown.correlation_id,
        )
        assert (first.payload.command_id, first.payload.command_type, first.payload.name) == (
            unknown.input_id,
            "workflow.start",
            "refuse_nobody_pushed",
        )
        assert first.payload.reason == (
            "no definition for workflow 'refuse_nobody_pushed' version (latest): "
            "none embedded and none registered"
        )
        second = rejection(env, invalid.workflow_id)
        assert second is not None and isinstance(second.payload, WorkflowRejected)
        assert second.payload.problems == [
            "task 'a': duplicate taskReferenceName",
            "task 'j': a JOIN must come right after a FORK_JOIN or FORK_JOIN_DYNAMIC",
        ]
        assert second.payload.reason.startswith(
            "invalid definition of workflow 'refuse_broken' version (latest): task 'a': dup"
        )

        # The read models take them: no workflow row, a rejections row each; equal to the log.
        stores: list[Store] = [PgStore(env.settings), SearchStore(env.settings)]
        try:
            for store in stores:
                wait_until(partial(caught_up, env, store), 60, f"the {store.name} projection")
        finally:
            for store in stores:
                store.close()
        assert projected(env)
        engine = engine_for(env.settings)
        with engine.connect() as conn:
            rows = conn.execute(select(REJECTIONS.c.workflow_id, REJECTIONS.c.reason)).all()
        engine.dispose()
        assert sorted(rows) == sorted(
            [
                (unknown.workflow_id, first.payload.reason),
                (invalid.workflow_id, second.payload.reason),
            ]
        )
        audit = es_sched("replay", "--verify", "--json", env=env.vars)
        assert audit.returncode == 0, audit.stdout + audit.stderr
        report = json.loads(audit.stdout)
        assert (report["refusals"], report["workflows"], report["mismatches"]) == (2, 1, 0)
        status = es_sched("status", unknown.workflow_id, env=env.vars)
        assert status.returncode == 1
        assert f"refused workflow.start command_id={unknown.input_id}" in status.stderr
    assert_log_invariants(env, {ok.workflow_id}, "RUNNING")


def run_cli(env: Env, *args: str) -> tuple[int, str, str]:
    """``es-sched ARGS``: exit status, stdout and the last line of stderr (librdkafka may log
    an info line of its own when a client closes). Prints the transcript (``pytest -s``)."""
    started = time.monotonic()
    done = es_sched(*args, env=env.vars)
    took = time.monotonic() - started
    print(
        f"$ es-sched {' '.join(args)}\n{done.stdout}{done.stderr}exit {done.returncode} "
        f"after {took:.2f}s"
    )
    last = done.stderr.splitlines()[-1] if done.stderr.strip() else ""
    return done.returncode, done.stdout, last


def test_control_commands_with_wait_exit_by_the_deciders_answer() -> None:
    env = Env()
    env.create()
    env.push(HOLD, [])
    unknown = f"no-such-workflow-{uuid.uuid4().hex[:8]}"
    # No decider yet: nobody answers, and the wait says so.
    code, _, err = run_cli(env, "pause", unknown, "--wait", "1")
    assert (code, err) == (3, f"no answer to pause of {unknown} within 1s (is a decider running?)")
    with roles(env, "decider"):
        code, out, err = run_cli(env, "cancel", unknown, "--wait", "10")
        assert code == 1 and out.startswith(f"cancel {unknown} command_id=")
        assert err == f"rejected: unknown workflow {unknown!r}: workflow.cancel refused"

        [sent] = env.submit("refuse_hold", [{}])
        wf = sent.workflow_id
        wait_until(lambda: wf in read_events(env), 60, "the workflow to start")
        code, _, err = run_cli(env, "resume", wf, "--wait", "10")
        assert (code, err) == (1, "rejected: workflow is RUNNING")  # its state forbids it
        code, out, err = run_cli(env, "cancel", wf, "--wait", "10", "--reason", "operator")
        assert code == 0, err
        assert out.splitlines()[-1] == (
            "accepted: workflow.ending CANCELED (operator), task.canceled (workflow canceled), "
            "workflow.ended CANCELED (operator)"
        )
    assert_log_invariants(env, {wf}, "CANCELED")
