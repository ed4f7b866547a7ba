"""What each API key role grants (ADR 25): one table, read by ``auth.require`` and the tests.

``viewer`` < ``operator`` < ``admin`` are ranked: an operator reads what it acts on, an admin
does everything. ``worker`` is apart: a worker key lives on every machine that runs workers,
so it polls and updates tasks and nothing else (it cannot read workflows' inputs, terminate
anything or define workflows), and no viewer or operator key can report a task's outcome
(that is a worker's word, or an admin's). ``admin`` grants ``worker`` too, for the demo and
for an operator forced to complete a stuck task by hand with an admin key.
"""

from __future__ import annotations

ROLES = ("viewer", "worker", "operator", "admin")

GRANTS: dict[str, frozenset[str]] = {
    "viewer": frozenset({"viewer"}),
    "worker": frozenset({"worker"}),
    "operator": frozenset({"operator", "viewer"}),
    "admin": frozenset(ROLES),
}


def grants(held: str, needed: str) -> bool:
    """Whether a key with role ``held`` may call a route that needs ``needed``."""
    return needed in GRANTS.get(held, frozenset())
