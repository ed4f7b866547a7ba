"""``es-sched run --processes 2`` (ADR 33) on the real broker: two child processes of the
decider, timer and retry roles share each role's consumer group, media workflows complete;
a killed child is restarted in its slot and gets its own partitions back (no rebalance); killed
again within its crash budget its slot stays down and the other child takes its partitions;
the work still completes and the log invariants hold.

Who owns what is read from the decider group's description (each member's
``group.instance.id`` is ``<prefix>-decider-<instance>-<slot>``), not from timing.
"""

from __future__ import annotations

import os
import re
import signal

import pytest
from confluent_kafka.admin import AdminClient

from testkit.runtime import (
    MEDIA,
    Env,
    Role,
    Worker,
    assert_log_invariants,
    completed,
    media_inputs,
)
from testkit.settings import kafka_connection
from testkit.wait import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.fault]

STARTED = re.compile(r"process (\d+) started \(pid (\d+)\)")
RESTORED_P1 = re.compile(r"\[p1\] es_sched\.decider: restored \d+ partitions")


def owners(env: Env) -> dict[str, list[int]]:
    """Decider group members by slot instance -> the ``commands`` partitions they own, when
    the group is stable (else empty)."""
    group = f"{env.prefix}-decider"
    admin = AdminClient(kafka_connection(env.bootstrap).config())
    described = admin.describe_consumer_groups([group])[group].result(10)
    if not str(described.state).endswith("STABLE"):
        return {}
    return {
        str(m.group_instance_id).removeprefix(f"{group}-"): sorted(
            tp.partition for tp in m.assignment.topic_partitions if tp.topic == env.topics.commands
        )
        for m in described.members
    }


def pids(parent: Role) -> list[tuple[int, int]]:
    """(slot, pid) of every child start, in order, from the parent's log."""
    return [(int(s), int(p)) for s, p in STARTED.findall(parent.text())]


def test_two_decider_processes_share_the_partitions_and_take_over_from_a_dead_one() -> None:
    env = Env()
    env.create()
    env.push_files(*MEDIA)
    argv = [
        "run",
        "--processes",
        "2",
        "--max-restarts",
        "1",
        "--role",
        "decider",
        "--role",
        "timers",
        "--role",
        "retry",
    ]
    parent = Role(env, "processes", argv=argv, ES_SCHED_RUN_INSTANCE="s")
    try:
        with Worker(env):
            both = ["s-0", "s-1"]
            wait_until(
                lambda: sorted(k for k, v in owners(env).items() if v) == both,
                90,
                "both children own partitions",
            )
            split = owners(env)
            assert sorted(split["s-0"] + split["s-1"]) == [0, 1, 2, 3], split
            ids = {s.workflow_id for s in env.submit("media_pipeline", media_inputs(40, "a"))}
            wait_until(lambda: completed(env) >= 40, 180, "40 workflows completed")

            # killed once: restarted in its slot, same instance, its own partitions back
            [victim] = [p for s, p in pids(parent) if s == 1]
            restores, before = len(RESTORED_P1.findall(parent.text())), len(parent.text())
            os.kill(victim, signal.SIGKILL)
            wait_until(
                lambda: len(RESTORED_P1.findall(parent.text())) > restores,
                60,
                "slot 1 restarted and restored its partitions",
            )
            assert len(pids(parent)) == 3 and "exited with status -9" in parent.text()
            assert owners(env) == split, "the restarted slot got another assignment"
            since = parent.text()[before:]
            assert not re.search(r"\[p0\] .*revoked partitions", since), since[-2000:]

            # killed again at once: a crash loop past --max-restarts 1, the slot stays down
            os.kill(pids(parent)[-1][1], signal.SIGKILL)
            parent.wait_log("process 1 stays down", 60)
            wait_until(
                lambda: owners(env) == {"s-0": [0, 1, 2, 3]},
                90,
                lambda: f"slot 0 owning every partition, have {owners(env)}",
            )
            more = {s.workflow_id for s in env.submit("media_pipeline", media_inputs(40, "b"))}
            wait_until(lambda: completed(env) >= 80, 180, "80 workflows completed")
    finally:
        parent.stop()
    assert parent.proc.returncode == 1, "a slot went down: the parent's status says so"
    assert len(pids(parent)) == 3, "nothing restarted the slot past its budget"
    assert_log_invariants(env, ids | more)
