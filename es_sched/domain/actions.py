"""Which operator action a workflow's status permits, and which role it needs: one table (ADR 59).

Conductor's rules: retry only an unsuccessful ended workflow (FAILED, TIMED_OUT, TERMINATED, and
es-sched's CANCELED), pause only a RUNNING one, resume only a PAUSED one, terminate (and cancel)
only one still open, restart and rerun only an ended one (COMPLETED included), a WAIT task's
signal and a parked task's review (ADR 71) only while the workflow is open. The decider refuses
by ``permits`` (``decide``); the console offers a button by ``permits`` and the role, and refuses
a click by the same two (409 for the state, 403 for the role) before anything is sent, so the
page, the console's server and the decider cannot disagree. ``role`` is the least API key role
(``es_sched.api.roles``) that grants the action; the core never interprets it.

Pure: statuses and role names in, a verdict out.
"""

from __future__ import annotations

from dataclasses import dataclass

from es_sched.domain.pickling import frozen_by_constructor
from es_sched.domain.state import (
    CANCELED,
    COMPLETED,
    FAILED,
    PAUSED,
    RUNNING,
    TERMINATED,
    TIMED_OUT,
    WORKFLOW_TERMINAL,
)

OPEN = frozenset({RUNNING, PAUSED})
UNSUCCESSFUL = frozenset({FAILED, TIMED_OUT, TERMINATED, CANCELED})


@dataclass(frozen=True)
class Rule:
    role: str  # the least role that grants it
    states: frozenset[str]  # the workflow statuses it applies to
    needs: str  # what it needs, said to whoever is refused: "only a PAUSED workflow ..."


def _only(states: frozenset[str], verb: str) -> str:
    return f"only a {' or '.join(sorted(states))} workflow can be {verb}"


RULES: dict[str, Rule] = {
    "retry": Rule("operator", UNSUCCESSFUL, _only(UNSUCCESSFUL, "retried")),
    "pause": Rule("operator", frozenset({RUNNING}), _only(frozenset({RUNNING}), "paused")),
    "resume": Rule("operator", frozenset({PAUSED}), _only(frozenset({PAUSED}), "resumed")),
    "terminate": Rule("operator", OPEN, _only(OPEN, "terminated")),
    "cancel": Rule("operator", OPEN, _only(OPEN, "canceled")),
    "restart": Rule("operator", WORKFLOW_TERMINAL, _only(WORKFLOW_TERMINAL, "restarted")),
    "rerun": Rule("operator", WORKFLOW_TERMINAL, _only(WORKFLOW_TERMINAL, "rerun")),
    "signal": Rule("operator", OPEN, _only(OPEN, "signalled")),
    # A task parked for review (ADR 71) is retried or failed while its workflow is open.
    "review": Rule("operator", OPEN, _only(OPEN, "reviewed")),
}
# The order the console shows them in.
ORDER = ("retry", "restart", "pause", "resume", "terminate", "cancel", "rerun", "signal", "review")
assert set(ORDER) == set(RULES)
assert COMPLETED in RULES["restart"].states


frozen_by_constructor(globals())  # pickled through constructors (domain.pickling, ADR 51)


def permits(action: str, status: str) -> bool:
    """Whether a workflow in ``status`` may take ``action`` (an unknown action: never)."""
    rule = RULES.get(action)
    return rule is not None and status in rule.states


def state_refusal(action: str, status: str) -> str | None:
    """Why a workflow in ``status`` may not take ``action``, or None when it may."""
    rule = RULES.get(action)
    if rule is None:
        return f"unknown action {action!r}; one of {', '.join(ORDER)}"
    if status in rule.states:
        return None
    return f"{rule.needs}; it is {status}"
