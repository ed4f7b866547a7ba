"""A ``Settler`` of fakes for route tests: every command is reflected at once, and the decider
refuses what ``refusals`` says (workflow id -> (reason, no history))."""

from __future__ import annotations

from es_sched.api.services import Services
from es_sched.api.writes import Settler
from es_sched.projections.read_your_writes import Token


def fake_settler(svc: Services, refusals: dict[str, tuple[str, bool]] | None = None) -> list[Token]:
    """Install the fake on ``svc``; returns the tokens it was asked to wait for."""
    waited: list[Token] = []
    said = refusals if refusals is not None else {}
    svc.settler.put(
        Settler(
            token_of=lambda sent: f"0:{len(sent.workflow_id)}",
            wait=lambda token, _timeout: waited.append(token),
            refusal=lambda wf_id, _cmd: said.get(wf_id),
            timeout_s=1.0,
        )
    )
    return waited
