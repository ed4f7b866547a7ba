"""A running ``es-sched run`` logs its threads' stacks on SIGUSR1 (what a fault test's timeout
message shows for each process still running) and keeps running."""

from __future__ import annotations

import pytest

from testkit.procs import stacks
from testkit.runtime import Env, Role

pytestmark = pytest.mark.integration


def test_sigusr1_shows_where_each_role_thread_waits_and_the_roles_go_on() -> None:
    env = Env()
    env.create()
    role = Role(env, "timers")
    try:
        role.wait_log("restored", 90)
        shown = stacks(role.proc, role.log)
        assert 'Thread "timers"' in shown, shown
        assert "es_sched/kafka/transactional.py" in shown, shown  # the role's loop
        assert role.proc.poll() is None, "SIGUSR1 does not stop the process"
    finally:
        role.stop()
    assert role.proc.returncode == 0, role.text()[-3000:]
