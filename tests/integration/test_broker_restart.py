"""kill -9 of the Kafka broker under load, then a restart: nothing is restarted but the broker.

A private single-node Kafka (own ports 19120/19121 and state folder, see private_kafka.py) runs
``es-sched run`` with the decider, timers, retry relay and dispatcher in one process, and one
``es-sched worker --noop``. With a few hundred media workflows in flight the broker is killed
with SIGKILL and started again on the same data. Before this loop existed the decider blocked
for good inside ``send_offsets_to_transaction`` and the dispatcher exited on a failed commit.

What proves the fault fired: the broker's pid is gone after the kill, workflows were still
running at that moment, and the roles' log shows librdkafka's connection failures. The end
state is checked on the log itself: every submitted workflow completed, each workflow's seq is
1..n without gaps or duplicates, no event id twice. The same role and worker processes ran
throughout and stop cleanly on SIGTERM.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from es_sched.stack import process
from tests.integration.private_kafka import PrivateKafka
from tests.integration.runtime_harness import (
    MEDIA,
    Env,
    Role,
    assert_log_invariants,
    final_status,
    read_events,
)
from tests.support.wait import wait_until

pytestmark = pytest.mark.integration
PORT, CONTROLLER_PORT = 19120, 19121
WORKFLOWS = 200
TYPES = "media.probe,media.transcode,media.thumbnail,media.package,media.write_asset,media.callback"
ROLES = ["run", *(a for r in ("decider", "timers", "retry", "dispatcher") for a in ("--role", r))]
WORKER = ["worker", "--noop", "--types", TYPES, "--concurrency", "8", "--heartbeat-s", "1"]


@pytest.fixture
def kafka(tmp_path: Path) -> Iterator[PrivateKafka]:
    if shutil.which("java") is None or shutil.which("mvn") is None:
        pytest.skip("a private broker needs java and mvn (the local stack's Kafka build)")
    broker = PrivateKafka(tmp_path / "state", PORT, CONTROLLER_PORT)
    try:
        broker.start()
        yield broker
    finally:
        broker.stop()


def completed(env: Env) -> int:
    return sum(final_status(v) == "COMPLETED" for v in read_events(env).values())


def tasks_completed(env: Env) -> int:
    return sum(e.type == "task.completed" for v in read_events(env).values() for e in v)


def test_kill_9_of_the_broker_under_load_then_restart_every_workflow_completes(
    kafka: PrivateKafka,
) -> None:
    # Leases of 4 x 10 s outlast the outage, so no task is taken back from the live worker.
    env = Env(bootstrap=kafka.bootstrap, extra={"ES_SCHED_DISPATCH_HEARTBEAT_S": "10"})
    env.create()
    env.push_files(*MEDIA)
    roles, worker = Role(env, "roles", ROLES), Role(env, "worker", WORKER)
    try:
        roles.wait_log("dispatcher started", 90)
        worker.wait_log("started", 90)
        inputs = [
            {"source_uri": f"file:///in/{i}.mp4", "asset_id": f"a{i}", "callback_url": "http://cb"}
            for i in range(WORKFLOWS)
        ]
        submitted = {s.workflow_id for s in env.submit("media_pipeline", inputs)}
        wait_until(lambda: tasks_completed(env) >= 150, 120, "150 tasks to complete")
        done_before = completed(env)

        killed = kafka.kill()  # kill -9; returns once the process is gone
        assert not Path(f"/proc/{killed}").exists() or not process.cmdline_contains(killed, "")
        assert done_before < WORKFLOWS, "the kill must hit workflows in flight"
        roles.wait_log("Connection refused", 60)  # the roles' clients saw the broker go
        kafka.start()  # same data folder: log recovery, then the same topics and groups
        wait_until(lambda: completed(env) == WORKFLOWS, 240, "every workflow after the restart")
        assert roles.proc.poll() is None and worker.proc.poll() is None, "nothing else restarted"
    finally:
        for r in (worker, roles):
            r.stop()
    log = roles.log.read_text(errors="replace")
    assert roles.proc.returncode == 0, f"SIGTERM stops the roles cleanly:\n{log[-3000:]}"
    assert "role decider failed" not in log and "role dispatcher failed" not in log
    assert_log_invariants(env, submitted)
