"""The supervisor of ``es-sched run --processes N`` (ADR 33), with stand-in children (small
Python scripts) instead of roles: slots get distinct stable instances, a stop request stops
every child, a dead child is restarted under its slot, a crash loop leaves the slot down and
the parent's status non-zero."""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import pytest

from es_sched.cli import processes
from es_sched.cli.processes import Supervisor, slot_instance
from testkit.wait import wait_until

# A child that notes its start (its INST variable, else its argument) and serves until SIGTERM.
SERVE = (
    "import os, signal, sys, time, pathlib\n"
    "signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))\n"
    "pathlib.Path(sys.argv[1]).open('a').write(os.environ.get('INST', sys.argv[2]) + '\\n')\n"
    "while True: time.sleep(0.05)\n"
)
CRASH = (
    "import sys, pathlib\n"
    "pathlib.Path(sys.argv[1]).open('a').write(sys.argv[2] + '\\n')\n"
    "sys.exit(3)\n"
)


@pytest.fixture(autouse=True)
def quick_restart(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(processes, "RESTART_DELAY_S", 0.05)


def starts(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


def test_slots_have_distinct_instances_that_survive_a_restart() -> None:
    assert [slot_instance("a", i) for i in range(3)] == ["a-0", "a-1", "a-2"]
    assert slot_instance("a", 1) == slot_instance("a", 1)


def test_a_stop_request_stops_every_child_and_the_status_is_zero(tmp_path: Path) -> None:
    seen = tmp_path / "starts"
    sup = Supervisor(
        3,
        lambda i: [sys.executable, "-c", SERVE, str(seen), str(i)],
        lambda i: {**os.environ},
        max_restarts=3,
        grace_s=10,
    )
    stop = threading.Event()
    result: list[int] = []
    t = threading.Thread(target=lambda: result.append(sup.run(stop)))
    t.start()
    wait_until(lambda: sorted(starts(seen)) == ["0", "1", "2"], 30, "three children started")
    stop.set()
    t.join(30)
    assert result == [0]
    assert all(s.proc is not None and s.proc.returncode == 0 for s in sup.slots)


def test_a_dead_child_is_restarted_in_its_slot_with_its_own_environment(tmp_path: Path) -> None:
    seen = tmp_path / "starts"
    sup = Supervisor(
        2,
        lambda i: [sys.executable, "-c", SERVE, str(seen), ""],
        lambda i: {**os.environ, "INST": slot_instance("x", i)},
        max_restarts=3,
        grace_s=10,
    )
    stop = threading.Event()
    result: list[int] = []
    t = threading.Thread(target=lambda: result.append(sup.run(stop)))
    t.start()
    wait_until(lambda: sorted(starts(seen)) == ["x-0", "x-1"], 30, "two children started")
    victim = sup.slots[1].proc
    assert victim is not None
    victim.kill()
    wait_until(lambda: sorted(starts(seen)) == ["x-0", "x-1", "x-1"], 30, "slot 1 restarted")
    stop.set()
    t.join(30)
    assert result == [1], "a child died: the parent says so in its status"


def test_a_crash_loop_leaves_the_slot_down_and_the_others_running(tmp_path: Path) -> None:
    seen = tmp_path / "starts"

    def command(i: int) -> list[str]:
        return [sys.executable, "-c", CRASH if i == 1 else SERVE, str(seen), str(i)]

    sup = Supervisor(2, command, lambda i: {**os.environ}, max_restarts=2, grace_s=10)
    stop = threading.Event()
    result: list[int] = []
    t = threading.Thread(target=lambda: result.append(sup.run(stop)))
    t.start()
    wait_until(lambda: sup.slots[1].down, 30, "slot 1 given up")
    assert starts(seen).count("1") == 3, "started once and restarted twice"
    assert t.is_alive() and sup.slots[0].proc is not None and sup.slots[0].proc.poll() is None
    stop.set()
    t.join(30)
    assert result == [1]


def test_the_parent_exits_when_every_slot_is_down(tmp_path: Path) -> None:
    seen = tmp_path / "starts"
    sup = Supervisor(
        2,
        lambda i: [sys.executable, "-c", CRASH, str(seen), str(i)],
        lambda i: {**os.environ},
        max_restarts=0,
        grace_s=10,
    )
    assert sup.run(threading.Event()) == 1
    assert sorted(starts(seen)) == ["0", "1"]
