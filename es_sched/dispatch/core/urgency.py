"""The SLA component of queue order (ADR 67): which level a ready task sits at, now.

Tier and slack decide a task's *level* and nothing else; the order inside a level and across
task types is the queues' and the engine's. A task without tier or deadline sits at its
priority, as before SLA tiers existed.

Slack = deadline - now - expected remaining critical path, where the path is the task's own
expected run time plus that of the worker tasks left after it on the longest chain of its
definition (the ready record's ``sla.after``, ``domain.sla.chain_after``). Each run time is the
learned P50 for its type (and, for the task itself, its size class) where the analytics role
has published one (``learned``: the dispatcher's ``StatsView``), else ``typical_s``. The rules
themselves are ``domain.sla``'s.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from es_sched.domain import sla
from es_sched.domain.learned import size_class


def _nothing_learned(_task_type: str, _size_class: str) -> float | None:
    return None


@dataclass
class Urgency:
    escalate_s: float = 0.0  # 0: no escalation
    typical_s: float = 1.0  # a task's run time when nothing was learned of its type
    learned: Callable[[str, str], float | None] = field(default=_nothing_learned)

    def run_time(self, task_type: str, cls: str = "any") -> float:
        found = self.learned(task_type, cls)
        if found is None and cls != "any":
            found = self.learned(task_type, "any")
        return self.typical_s if found is None else found

    def remaining_s(
        self,
        task_type: str,
        task_input: dict[str, object],
        resources: dict[str, object],
        after: tuple[str, ...],
    ) -> float:
        own = self.run_time(task_type, size_class(task_input, resources))
        estimates = {name: self.run_time(name) for name in set(after)}
        return sla.expected_remaining(own, after, estimates, self.typical_s)

    def level(
        self,
        priority: int,
        tier: str | None,
        deadline: datetime | None,
        remaining_s: float,
        now: datetime,
    ) -> int:
        slack = None if deadline is None else sla.slack_s(deadline, now, remaining_s)
        return sla.level(priority, tier, slack, self.escalate_s)
