"""Blacklisting a user can trust (ADR 58), on the real broker with the real worker SDK, decider,
dispatcher and API.

One worker of pool ``media`` serves ``media.transcode``. Terminal input errors (a missing source
file, as the media probe's) never bench it: after six of them a normal task is still placed on
that same worker (the sentinel), and no blacklist record exists. Host faults (``HostFault``) do:
after the window's threshold the dispatcher writes ``blacklist:<worker>`` to the config topic
with the failures that caused it. A restarted dispatcher applies that record (its own
``es_sched_worker_blacklisted`` and ``es_sched_queue_unplaceable`` say so, and a waiting task
stays unplaced), ``/api/v1`` and the queue views say why, and a lift through the API lets the
waiting task run on the worker; the audit's rules hold on the log."""

from __future__ import annotations

import pytest

from es_sched import bootstrap
from es_sched.audit.check import check
from es_sched.audit.read import read_log
from es_sched.domain.events import TaskFailed
from es_sched.kafka import config_client
from es_sched.workers import Worker
from testkit.api import Api
from testkit.net import free_port
from testkit.runtime import Env, Role, read_events
from testkit.wait import wait_until
from tests.integration.blacklist_harness import (  # noqa: F401 - fixtures
    TYPE,
    WORKER_ID,
    ended,
    env_fixture,
    metrics,
    run,
    stack_fixture,
    statuses,
    worker_fixture,
)

pytestmark = pytest.mark.integration


def test_input_errors_never_bench_a_worker_and_its_own_faults_do_until_lifted(
    env: Env, stack: Api, worker: Worker
) -> None:
    decider, first = Role(env, "decider"), Role(env, "dispatcher")
    projector = Role(env, "projector-pg")  # the queues' read model
    port = free_port()
    second: Role | None = None
    try:
        for r in (decider, first, projector):
            r.wait_log("started", 90)
        # Six terminal input errors, then the sentinel: placed on the same (only) worker.
        ended(env, run(env, "bad", 6), "FAILED")
        sentinel = run(env, "ok")
        ended(env, sentinel, "COMPLETED")
        dispatched = [e for e in read_events(env)[sentinel[0]] if e.type == "task.dispatched"]
        assert [e.payload.worker_id for e in dispatched] == [WORKER_ID]  # type: ignore[attr-defined]
        assert not [k for k in config_client.current(env.settings) if k.startswith("blacklist:")]
        shown = stack.http.get("/api/v1/workers").json()["workers"]
        assert [(w["workerId"], w["blacklisted"]) for w in shown] == [(WORKER_ID, False)]

        # Two host faults after that success: 2 of 3 outcomes, over half: benched.
        faulty = run(env, "host", 2)
        ended(env, faulty, "FAILED")
        key = f"blacklist:{WORKER_ID}"
        wait_until(lambda: key in config_client.current(env.settings), 30, f"the {key} record")
        record = config_client.current(env.settings)[key]
        history = read_events(env)
        faulted = {
            e.payload.task_id
            for wid in faulty
            for e in history[wid]
            if isinstance(e.payload, TaskFailed) and e.payload.host_fault
        }
        assert record["state"] == "blacklisted" and record["outcomes"] == 3
        assert {f["task_id"] for f in record["failures"]} == faulted and len(faulted) == 2
        assert {f["fault"] for f in record["failures"]} == {"host fault"}

        # A restarted dispatcher reads it from the config topic and places nothing on the worker.
        first.stop()
        second = Role(env, "dispatcher", ES_SCHED_RUN_METRICS_PORT=str(port))
        second.wait_log("started", 90)
        line = f'es_sched_worker_blacklisted{{pool="media",worker="{WORKER_ID}"}} 1'
        wait_until(lambda: line in metrics(port), 30, lambda: f"{line}: {metrics(port)}")
        waiting = run(env, "ok")
        labels = f'pool="media",reason="blacklisted",task_type="{TYPE}"'
        unplaceable = f"es_sched_queue_unplaceable{{{labels}}} 1"
        wait_until(lambda: unplaceable in metrics(port), 30, lambda: metrics(port))

        (row,) = stack.http.get("/api/v1/workers").json()["workers"]
        assert row["blacklisted"] is True and row["blacklist"]["why"] == "2 of 3 failed"
        assert {f["taskId"] for f in row["blacklist"]["failures"]} == faulted

        def queue_says() -> str:
            rows = stack.http.get("/api/v1/queues").json()["queues"]
            return " ".join(q["unplaceable"] or "" for q in rows if q["taskType"] == TYPE)

        wait_until(lambda: "blacklisted until" in queue_says(), 30, queue_says)
        assert queue_says().startswith("pool media: 1 worker, blacklisted until ")
        assert queue_says().endswith(": 2 of 3 failed")
        conductor = stack.http.get("/api/tasks/queue/unplaceable", params={"taskType": TYPE})
        assert conductor.json()[TYPE]["reason"] == "blacklisted"
        assert statuses(env, waiting) == {waiting[0]: "RUNNING"}

        # Lifted through the API: the waiting task runs on that worker.
        lifted = stack.http.post(f"/api/v1/workers/{WORKER_ID}/lift")
        assert lifted.status_code == 200, lifted.text
        ended(env, waiting, "COMPLETED")
        (row,) = stack.http.get("/api/v1/workers").json()["workers"]
        assert row["blacklisted"] is False and row["liftedBy"] == "anonymous"
        assert config_client.current(env.settings)[key]["state"] == "lifted"
        assert stack.http.post(f"/api/v1/workers/{WORKER_ID}/lift").status_code == 404
        wait_until(lambda: "es_sched_worker_blacklisted{" not in metrics(port), 30, "the gauge")
        # The audit's rules hold on this log (I5: deciding the recorded inputs, host_fault
        # included, gives the recorded events; I6: the blacklisting, still in the config
        # topic's active segment beside its lift, cites only the worker's own faults); every
        # workflow has ended.
        report = check(read_log(env.settings), True, bootstrap.script_engine())
        assert report.ok, "\n".join(v.line() for v in report.violations[:20])
        assert report.counts["blacklistings"] >= 1 and report.counts["I6"] == 0
        assert len(report.states) == 6 + 1 + 2 + 1
    finally:
        for role in (second, first, decider, projector):
            if role is not None:
                role.stop()
