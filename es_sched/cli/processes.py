"""``es-sched run --processes N``: N child processes of the same roles, supervised (ADR 33).

Each child is a whole ``es-sched run`` of the parent's roles in slot ``i`` (0..N-1), with
``ES_SCHED_RUN_INSTANCE = <parent instance>-<i>``. The decider, timers and retry relay derive
their transactional id and static ``group.instance.id`` from the instance (ADR 4, ADR 21), so
the children are distinct members of one consumer group per role (the group spreads the
partitions over them), while a slot restarted under its index has the same ids: its new
producer fences the old one's transactions and its consumer gets the slot's partitions back
without a rebalance. The dispatcher and the projectors are dynamic members of their groups,
which several processes may share (ADR 13, ADR 7).

Supervision, the rule in one place (``Supervisor``):
- SIGTERM/SIGINT to the parent: every live child gets SIGTERM (it finishes its transaction);
  a child still alive ``grace_s`` later is killed and the parent exits non-zero.
- A child that exits on its own is logged (slot, pid, exit status) and restarted under the
  same slot after ``RESTART_DELAY_S``: with static membership that is the fastest way back
  (its partitions wait for it, idle, until its session ends; ADR 21). A slot that dies
  ``max_restarts`` times in a row, each run shorter than ``STABLE_AFTER_S``, is a crash loop:
  it stays down, its partitions move to the other slots when its session ends. A slot that ran
  for ``STABLE_AFTER_S`` has its count reset. Any child that died makes the parent's status
  non-zero when it stops (at once when no slot is left), so an outer supervisor sees it.
- The children die with the parent (``PR_SET_PDEATHSIG`` on Linux): a parent killed with -9
  leaves no orphan holding partitions.
"""

from __future__ import annotations

import ctypes
import logging
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

log = logging.getLogger("es_sched.processes")

RESTART_DELAY_S = 1.0
STABLE_AFTER_S = 60.0
_PR_SET_PDEATHSIG = 1


def slot_instance(instance: str, slot: int) -> str:
    """The instance of slot ``slot`` under a parent of ``instance``: stable across restarts of
    the slot (fencing and static membership hold per slot), distinct between slots."""
    return f"{instance}-{slot}"


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


@dataclass
class Slot:
    index: int
    proc: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    crashes: int = 0  # consecutive short runs that ended on their own
    restart_at: float | None = None
    down: bool = False


class Supervisor:
    """Starts ``n`` children (``command(i)``, ``env(i)``), restarts the ones that die, stops
    them all when ``stop`` is set. ``run`` returns the parent's exit status."""

    def __init__(
        self,
        n: int,
        command: Callable[[int], Sequence[str]],
        env: Callable[[int], dict[str, str]],
        max_restarts: int,
        grace_s: float,
    ) -> None:
        self.slots = [Slot(i) for i in range(n)]
        self.command, self.env = command, env
        self.max_restarts, self.grace_s = max_restarts, grace_s
        self.failed = False

    def _start(self, slot: Slot) -> None:
        slot.proc = subprocess.Popen(
            list(self.command(slot.index)),
            env=self.env(slot.index),
            preexec_fn=_die_with_parent if sys.platform == "linux" else None,  # noqa: PLW1509
        )
        slot.started, slot.restart_at = time.monotonic(), None
        log.info("process %d started (pid %d)", slot.index, slot.proc.pid)

    def _exited(self, slot: Slot, code: int) -> None:
        """A child ended without being asked: restart it, or leave the slot down."""
        assert slot.proc is not None
        ran = time.monotonic() - slot.started
        slot.crashes = 1 if ran >= STABLE_AFTER_S else slot.crashes + 1
        log.error(
            "process %d (pid %d) exited with status %d after %.1fs",
            slot.index,
            slot.proc.pid,
            code,
            ran,
        )
        slot.proc = None
        self.failed = True
        if slot.crashes > self.max_restarts:
            slot.down = True
            log.error(
                "process %d stays down (%d exits in a row, --max-restarts %d): its partitions "
                "move to the other processes when its group session ends",
                slot.index,
                slot.crashes,
                self.max_restarts,
            )
        else:
            slot.restart_at = time.monotonic() + RESTART_DELAY_S

    def run(self, stop: threading.Event) -> int:
        for slot in self.slots:
            self._start(slot)
        while not stop.is_set() and not all(s.down for s in self.slots):
            for slot in self.slots:
                if slot.proc is not None and (code := slot.proc.poll()) is not None:
                    self._exited(slot, code)
                if slot.restart_at is not None and time.monotonic() >= slot.restart_at:
                    self._start(slot)
            stop.wait(0.2)
        if not stop.is_set():
            log.error("every process is down: exiting")
        return self._stop_all()

    def _stop_all(self) -> int:
        live = [s for s in self.slots if s.proc is not None and s.proc.poll() is None]
        for slot in live:
            assert slot.proc is not None
            slot.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self.grace_s
        for slot in live:
            assert slot.proc is not None
            try:
                code = slot.proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.error(
                    "process %d (pid %d) did not stop within %.0fs: killed",
                    slot.index,
                    slot.proc.pid,
                    self.grace_s,
                )
                slot.proc.kill()
                slot.proc.wait()
                self.failed = True
                continue
            if code != 0:
                log.error("process %d stopped with status %d", slot.index, code)
                self.failed = True
        log.info("all processes stopped")
        return 1 if self.failed else 0
