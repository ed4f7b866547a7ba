"""A decider killed and restarted under its instance id takes its partitions back without a
rebalance (static group membership, ADR 21).

Two deciders (instances ``a`` and ``b``) share the partitions. ``b`` is killed with SIGKILL
under load and restarted at once with the same ``ES_SCHED_RUN_INSTANCE``. The fact that proves
"no rebalance wait": the survivor ``a`` is never revoked. The group runs the eager range
assignor, so any rebalance revokes every member's partitions first, and the coordinator cannot
hand the restarted ``b`` anything until ``a`` has rejoined, which it does only after its revoke
callback logged "revoked partitions". With dynamic membership (before ADR 21, or
``ES_SCHED_RUN_STATIC_MEMBERSHIP=false``) the restarted ``b`` is a new member: its joining
starts a rebalance that revokes ``a`` and waits for the dead member's session to end. So when
the new ``b`` has restored its partitions, ``a``'s log since the kill must hold neither a
revocation nor a restore, and ``b`` must have been handed exactly the partitions it held before.
(The log lines waited on are the same before and after ADR 21, so this test runs on both.)
"""

from __future__ import annotations

import re
import signal
import threading
from typing import Any

import pytest

from testkit.fault_report import Row, record
from testkit.runtime import (
    MEDIA,
    Env,
    Role,
    Worker,
    assert_log_invariants,
    complete_all,
    completed,
    media_inputs,
    read_events,
    roles,
)
from testkit.wait import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.fault]

RESTORED = re.compile(r"restored partition (\d+):")


def restored(role: Role) -> list[int]:
    """The partitions the role has restored (taken on) so far, from its log."""
    return sorted({int(p) for p in RESTORED.findall(role.text())})


def in_flight(env: Env) -> int:
    """Workflows started and not ended, counted from the committed log."""
    ended = ("workflow.completed", "workflow.failed", "workflow.terminated")
    return sum(
        any(e.type == "workflow.started" for e in events)
        and not any(e.type in ended for e in events)
        for events in read_events(env).values()
    )


def test_a_decider_restarted_under_its_instance_gets_its_partitions_back_without_a_rebalance() -> (
    None
):
    env = Env()  # static membership is the default
    env.create()
    env.push_files(*MEDIA)
    n = 300
    gate = threading.Event()  # the worker holds every task until the restarted b is checked

    def gated(task: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        gate.wait(300)
        return complete_all(task)

    with Worker(env, gated), roles(env, "decider", ES_SCHED_RUN_INSTANCE="a") as (survivor,):
        victim = Role(env, "decider", ES_SCHED_RUN_INSTANCE="b")
        try:
            # b joined: the range assignor gives each of the two members two partitions
            wait_until(lambda: len(restored(victim)) == 2, 90, "b restored two partitions")
            held = restored(victim)
            ids = {s.workflow_id for s in env.submit("media_pipeline", media_inputs(n))}
            wait_until(lambda: len(read_events(env)) >= n, 120, "every workflow started")
            victim.kill()
        finally:
            victim.stop()
            if victim.proc.returncode != -signal.SIGKILL:
                gate.set()
        # What proves the fault fired: the process ended by SIGKILL while holding partitions.
        assert victim.proc.returncode == -signal.SIGKILL
        flying = in_flight(env)
        assert flying > 0, "nothing was in flight at the kill: the fault proved nothing"
        before = len(survivor.text())
        back = Role(env, "decider", ES_SCHED_RUN_INSTANCE="b")
        try:
            wait_until(lambda: len(restored(back)) >= len(held), 90, "b restored again")
            since_kill = survivor.text()[before:]
            assert "revoked partitions" not in since_kill, (
                f"the surviving decider saw a rebalance after the kill:\n{since_kill[-2000:]}"
            )
            assert "restored partition" not in since_kill, since_kill[-2000:]
            assert restored(back) == held, "the restarted member got another assignment"
            gate.set()
            wait_until(lambda: completed(env) >= n, 300, f"{n} workflows completed")
        finally:
            gate.set()
            back.stop()
    assert_log_invariants(env, ids)
    record(
        Row(
            fault="kill -9 of one of two deciders, restarted under its instance (ADR 21)",
            in_flight=flying,
            proof=f"exit by SIGKILL holding partitions {held}",
            invariants=f"I1-I3, I5 clean ({n} workflows); survivor never revoked",
            recovery=f"restarted member handed {held} again with no rebalance",
        )
    )
