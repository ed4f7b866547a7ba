"""The hostile input campaign (issue 52 item 4, ADR 75): invalid commands and task results,
drawn by hypothesis from the JSON Schemas (``testkit.hostile``), through Kafka (the commands
and task-results topics, as any producer that reaches the broker can write them) and through
the HTTP API (Conductor's ``/api`` and ``/api/v1``), while legitimate workflows run.

Proved for every input: it is refused with a reason (a dead letter whose origin is its
offset, ``workflow.rejected`` or ``task.completion_rejected`` caused by its id, a 4xx with a
message) and causes no event that is not a refusal. Proved for the workflows: the only ones
with a history are the legitimate ones; those the campaign ran beside completed with their
own outputs, each event caused by their own inputs; the victims (a task leased and never
reported, which forged reports aim at) hold the events they had before plus refusals. Ends
with the audit (``check``) clean, its refused-input count equal to the decider's dead
letters: the 300 KB StartWorkflow over the command cap among them (not lost work, ADR 75).

What proves the campaign reached the decider: every input's refusal is waited for in the log
(facts, not sleeps), and the counts by mutation and outcome are printed (``pytest -s``).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from es_sched import bootstrap
from es_sched.audit.check import check
from es_sched.audit.read import read_log
from es_sched.domain.events import WorkflowCompleted
from testkit.api import launch, serving
from testkit.campaign import (
    HELD,
    RECORDED,
    REFUSALS,
    HoldingWorker,
    outcomes,
    produce,
    send_http,
)
from testkit.hostile import campaign, http_campaign
from testkit.runtime import Env, final_status, histories, read_events, roles
from testkit.scale import pick
from testkit.wait import wait_until

pytestmark = pytest.mark.integration

KAFKA_INPUTS = pick(ci=300, full=9000)
HTTP_INPUTS = pick(ci=100, full=1000)
LEGIT, VICTIMS = pick(ci=20, full=200), 4
PATIENCE_S = pick(ci=60, full=900)  # for every input's answer and the legitimate work
LEGIT_NAME = "fuzz_legit"
LEGIT_DEF = {
    "name": LEGIT_NAME,
    "version": 1,
    "tasks": [
        {"name": "fuzz_a", "taskReferenceName": "a", "type": "SIMPLE"},
        {"name": "fuzz_b", "taskReferenceName": "b", "type": "SIMPLE"},
    ],
    "outputParameters": {"b": "${b.output.ok}"},
}
VICTIM_DEF = {
    "name": "fuzz_victim",
    "version": 1,
    "tasks": [{"name": HELD, "taskReferenceName": "h", "type": "SIMPLE"}],
}
TASKDEFS = [
    {"name": n, "retryCount": 0, "timeoutSeconds": 3600, "responseTimeoutSeconds": 3600}
    for n in ("fuzz_a", "fuzz_b", HELD)
]


def test_hostile_inputs_are_refused_with_a_reason_and_change_no_workflow() -> None:
    env = Env()
    env.create()
    env.push(LEGIT_DEF, TASKDEFS[:2])
    env.push(VICTIM_DEF, TASKDEFS[2:])
    cap = env.settings.runtime.command_max_bytes
    launched = launch(env)  # starts beside the roles
    with roles(env, "decider", "projector-pg"), HoldingWorker(env) as worker:
        victims_sent = env.submit("fuzz_victim", [{"v": i} for i in range(VICTIMS)])
        wait_until(lambda: len(worker.victims) == VICTIMS, 60, "the victims' tasks leased")
        victims = sorted(worker.victims.values(), key=lambda v: v.workflow_id)
        wait_until(lambda: all(dispatched(env, v.workflow_id) for v in victims), 60, "leases")
        before = {wf: [e.event_id for e in h] for wf, h in histories(env).items()}

        legit = env.submit("fuzz_legit", [{"n": i} for i in range(LEGIT // 2)])
        hostile = campaign(KAFKA_INPUTS, victims, cap, LEGIT_NAME)
        placed = produce(env, hostile)
        with serving(launched) as server:
            requests = http_campaign(HTTP_INPUTS, victims, cap, LEGIT_NAME)
            answered = send_http(server.http, requests)
        legit += env.submit("fuzz_legit", [{"n": i} for i in range(LEGIT // 2, LEGIT)])

        wait_until(
            lambda: len(outcomes(env, placed).refused) == len(hostile),
            PATIENCE_S,
            lambda: f"every hostile input answered: {outcomes(env, placed).unanswered(hostile)}",
        )
        legit_ids = {s.workflow_id for s in legit}
        wait_until(
            lambda: completed(env, legit_ids), PATIENCE_S, "the legitimate workflows completed"
        )
        found = outcomes(env, placed)

    print(json.dumps({"kafka": found.counts(hostile), "http": http_counts(answered)}, indent=1))
    assert found.moved == [], found.moved[:10]
    no_reason = [h.n for h in hostile if not found.reasons.get(h.n)]
    assert no_reason == [], f"refused without a reason: {no_reason[:10]}"
    big = hostile[-1]  # the 300 KB start (testkit.hostile.oversize_start)
    assert (found.refused[big.n], found.reasons[big.n]) == (
        "dead_letter",
        f"record is {len(big.value)} bytes, over the cap of {cap} bytes",
    )

    wrong = [(a.request.mutation, a.request.path, a.status, a.reason[:200]) for a in answered]
    assert [w for w in wrong if not (400 <= w[2] < 500 and w[3])] == [], "each a 4xx with why"
    claims = {a.input_id for a in answered if a.input_id}
    refused_claims = {
        e.causation_id for es in read_events(env).values() for e in es if e.type in REFUSALS
    }
    unrecorded = claims - refused_claims - found.dead_ids
    assert not unrecorded, f"task updates refused, sent for the record, not in it: {unrecorded}"

    # No workflow but the legitimate ones has a history; theirs hold only their own events.
    have = histories(env)
    victim_ids = {s.workflow_id for s in victims_sent}
    assert set(have) == legit_ids | victim_ids, sorted(set(have) - legit_ids - victim_ids)[:5]
    for wf in legit_ids:
        events = have[wf]
        end = events[-1].payload
        assert isinstance(end, WorkflowCompleted) and end.output == {"b": "b"}, wf
        assert all(e.type not in REFUSALS for e in events), wf
    report = check(read_log(env.settings), False, bootstrap.script_engine())
    for v in victims:  # the lease the worker holds is the lease it held; nothing else moved
        kept = [e.event_id for e in have[v.workflow_id] if e.type not in RECORDED]
        assert kept == before[v.workflow_id], f"victim {v.workflow_id} changed"
        st = report.states[v.workflow_id]
        task = st.tasks[v.task_id]
        assert (st.status, task.status, task.worker_id, task.lease_epoch, task.lease_token) == (
            "RUNNING",
            "SCHEDULED",
            v.worker_id,
            v.lease_epoch,
            v.lease_token,
        )

    assert report.ok, "\n".join(v.line() for v in report.violations[:20])
    assert report.counts["refused_inputs"] == found.dead_lettered_by_decider
    assert found.dead_lettered_by_decider >= sum(r == "dead_letter" for r in found.refused.values())


def dispatched(env: Env, workflow_id: str) -> bool:
    return any(e.type == "task.dispatched" for e in read_events(env).get(workflow_id, []))


def completed(env: Env, ids: set[str]) -> bool:
    events = read_events(env)
    return all(final_status(events.get(wf, [])) == "COMPLETED" for wf in ids)


def http_counts(answered: list[Any]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for a in answered:
        by = out.setdefault(a.request.mutation, {})
        by[str(a.status)] = by.get(str(a.status), 0) + 1
    return out
