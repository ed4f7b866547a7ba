"""The console's verdict on an action: the key's role (``roles.grants``) and the workflow's
status (``domain.actions.RULES``), both from the one table (ADR 59).

``offered`` is what the page shows as buttons; ``refusal`` is what the console's server answers
a click the page should not have offered (a stale page: the workflow ended meanwhile, or the
browser's key changed): 403 for the role, 409 for the state, with the reason the page shows.
Pure: role and status in, a verdict out.
"""

from __future__ import annotations

from dataclasses import dataclass

from es_sched.api.roles import grants
from es_sched.domain.actions import ORDER, RULES, state_refusal


@dataclass(frozen=True)
class Refusal:
    status: int  # HTTP: 403 the role, 409 the state, 400 an unknown action
    reason: str


def role_allows(action: str, role: str) -> bool:
    rule = RULES.get(action)
    return rule is not None and grants(role, rule.role)


def refusal(action: str, role: str, status: str | None) -> Refusal | None:
    """Why a key with ``role`` may not take ``action`` on a workflow in ``status``, or None.

    ``status`` None: the read model has no row for it yet; only the decider can say then."""
    rule = RULES.get(action)
    if rule is None:
        return Refusal(400, f"unknown action {action!r}; one of {', '.join(ORDER)}")
    if not grants(role, rule.role):
        return Refusal(403, f"{action} needs role {rule.role}; this key has role {role}")
    why = state_refusal(action, status) if status is not None else None
    return Refusal(409, why) if why else None


def offered(role: str, status: str) -> tuple[str, ...]:
    """The actions to show as buttons, in the console's order."""
    return tuple(a for a in ORDER if refusal(a, role, status) is None)
