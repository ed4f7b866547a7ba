"""CPU seconds a process and its descendants have used, from ``/proc`` (Linux; no psutil).

``tree_cpu_s(pid)`` sums ``utime + stime`` of ``pid`` and every live descendant: an ``es-sched
api --workers N`` supervisor and its worker processes, or a role and its children. Sampled
before and after a stretch of work, the difference is what that work cost them (a process that
ended in between takes its CPU with it: sample while they all live).
"""

from __future__ import annotations

import os
from pathlib import Path

TICK_S = 1 / os.sysconf("SC_CLK_TCK")


def _stat(pid: str) -> tuple[int, float] | None:
    """(parent pid, CPU seconds) of ``pid``, None once it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()  # after "pid (comm) "; comm may hold spaces
    return int(fields[1]), (int(fields[11]) + int(fields[12])) * TICK_S


def tree_cpu_s(pid: int) -> float:
    stats = {int(p): s for p in os.listdir("/proc") if p.isdigit() and (s := _stat(p))}
    children: dict[int, list[int]] = {}
    for child, (parent, _cpu) in stats.items():
        children.setdefault(parent, []).append(child)
    total, todo = 0.0, [pid]
    while todo:
        at = todo.pop()
        total += stats[at][1] if at in stats else 0.0
        todo.extend(children.get(at, []))
    return total
