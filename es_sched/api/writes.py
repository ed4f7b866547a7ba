"""Read-your-writes for every write through the API (ADR 56): a write answers once its effect
is visible to the next call, or says why not.

A command (a start, terminate, pause, resume, retry, restart, rerun, signal, cancel) is
durable when ``CommandClient`` returns; ``settle`` then waits for its token
(``projections.read_your_writes``): the decider has consumed it and the PostgreSQL read
model the reads use reflects every event it caused. Only then is the decider's verdict known
to the API, and it is read from that read model by command id (``queries.refusal_of``): a
refusal outside any history (the workflow has none: "no such workflow", a start that cannot
start) or one inside the workflow's history (``command.rejected``). The verdict, not the
read model's rows, decides the answer: a workflow the rows do not show yet may exist, so the
API sends the command and lets the decider say.

How a verdict becomes HTTP is here, once, for the Conductor routes, ``/api/v1`` and the
console: a refused start is 400 with the decider's reason; an action on a workflow with no
history is 404 with the reason; an action the workflow refused is 409. Every wait is bounded
by ``ES_SCHED_API_READ_YOUR_WRITES_TIMEOUT_S``; past it the answer is 503 with the reason and
the token (body and ``X-Es-Sched-Token``), never a success the next read would contradict.

A definition or TaskDef push is visible once the registry the API reads
(``CommandClient.definitions``, what a start resolves against) holds it: ``registered``.

Every wait blocks: the routes that call these are plain ``def`` routes (FastAPI's thread
pool), so the event loop never waits. One ``DeciderProbe`` per API process serves them all.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from es_sched.api.errors import ApiError
from es_sched.api.services import Services
from es_sched.commands.client import Submitted
from es_sched.commands.prepare import UnknownDefinition
from es_sched.projections.postgres import queries
from es_sched.projections.read_your_writes import (
    FIRST_PAUSE_S,
    LAST_PAUSE_S,
    DeciderProbe,
    NotFreshYet,
    Token,
    wait_projected,
)

JSON = dict[str, Any]
START_REFUSED = 400  # the start's input or definition: the request's fault
NO_HISTORY = 404  # an action on a workflow the decider has no history of
ACTION_REFUSED = 409  # an action the workflow's state refuses (pause of a paused one, ...)


@dataclass(frozen=True)
class Verdict:
    """What the decider made of one command, as the read model shows it."""

    sent: Submitted
    token: str
    refused: str | None = None  # the decider's reason; None: accepted
    no_history: bool = False  # refused because the workflow has no history

    @property
    def workflow_id(self) -> str:
        return self.sent.workflow_id


@dataclass
class Settler:
    """The waiting, with its three dependencies as functions (fakes in unit tests)."""

    token_of: Callable[[Submitted], str | None]  # a command -> its own token
    wait: Callable[[Token, float], None]  # block until the read model reflects the token
    refusal: Callable[[str, str], tuple[str, bool] | None]  # (workflow, command) -> verdict
    timeout_s: float
    close: Callable[[], None] = lambda: None

    def settle(self, sent: Sequence[Submitted]) -> list[Verdict]:
        """Wait until the read model reflects every command in ``sent``; their verdicts.

        Commands on one partition are reflected in order, so one wait per partition (for its
        last command) covers them all."""
        tokens = [self._token(s) for s in sent]
        last: dict[int, Token] = {}
        for token in tokens:
            if token.offset >= last.get(token.partition, token).offset:
                last[token.partition] = token
        deadline = time.monotonic() + self.timeout_s
        for token in last.values():
            try:
                self.wait(token, max(0.0, deadline - time.monotonic()))
            except NotFreshYet as exc:
                text = f"{token.partition}:{token.offset}"
                raise ApiError(
                    503,
                    f"the command was accepted, but its effect is not visible within "
                    f"{self.timeout_s:g}s (ES_SCHED_API_READ_YOUR_WRITES_TIMEOUT_S): {exc}; "
                    f"read with ?after={text} to wait for it",
                    token=text,
                ) from None
        verdicts = []
        for s, token in zip(sent, tokens, strict=True):
            found = self.refusal(s.workflow_id, s.command_id)
            text = f"{token.partition}:{token.offset}"
            if found is None:
                verdicts.append(Verdict(s, text))
            else:
                verdicts.append(Verdict(s, text, refused=found[0], no_history=found[1]))
        return verdicts

    def _token(self, sent: Submitted) -> Token:
        text = self.token_of(sent)
        if text is None:  # a delivered command always has one
            raise ApiError(503, f"no read-your-writes token for workflow {sent.workflow_id}")
        return Token.parse(text)


def settler(svc: Services) -> Settler:
    """The API process's ``Settler`` (one ``DeciderProbe``, made on first use)."""

    def make() -> Settler:
        probe = DeciderProbe(svc.settings)

        def wait(token: Token, timeout_s: float) -> None:
            wait_projected(svc.settings, svc.pg.get(), token, timeout_s, probe)

        return Settler(
            token_of=lambda sent: sent.token,
            wait=wait,
            refusal=lambda wf_id, cmd_id: queries.refusal_of(svc.engine, wf_id, cmd_id),
            timeout_s=svc.settings.api.read_your_writes_timeout_s,
            close=probe.close,
        )

    return svc.settler.get(make)


# -- the answers ------------------------------------------------------------------------------
def started(svc: Services, sent: Submitted) -> Verdict:
    """A start the read model shows, or the decider's refusal as a 400."""
    [verdict] = settler(svc).settle([sent])
    if verdict.refused is not None:
        raise ApiError(
            START_REFUSED,
            f"workflow {sent.workflow_id} was not started: {verdict.refused}",
            token=verdict.token,
        )
    return verdict


def acted(svc: Services, sent: Submitted, action: str) -> Verdict:
    """An action the read model shows, or the decider's refusal: 404 when the workflow has no
    history, 409 when the workflow refused it."""
    [verdict] = settler(svc).settle([sent])
    problem = refusal_error(action, verdict)
    if problem is not None:
        raise problem
    return verdict


def refusal_error(action: str, verdict: Verdict) -> ApiError | None:
    """The HTTP answer to a refused action (None when it was accepted)."""
    if verdict.refused is None:
        return None
    status = NO_HISTORY if verdict.no_history else ACTION_REFUSED
    return ApiError(
        status,
        f"{action} of workflow {verdict.workflow_id} refused: {verdict.refused}",
        token=verdict.token,
    )


def unknown_definition(exc: UnknownDefinition) -> ApiError:
    """``UnknownDefinition`` said to an HTTP client (the CLI's message names a CLI command)."""
    which = (
        f"{exc.name!r} version {exc.version}"
        if exc.version is not None
        else f"{exc.name!r} (any version)"
    )
    via = f" (a SUB_WORKFLOW of {exc.needed_by!r})" if exc.needed_by else ""
    return ApiError(
        404,
        f"no workflow definition {which}{via} is registered; "
        "register it with POST /api/metadata/workflow",
    )


def registered(svc: Services, workflows: Sequence[JSON], taskdefs: Sequence[JSON]) -> None:
    """Block until the registry a start resolves against holds these documents as pushed
    (503 past the timeout)."""
    client = svc.commands.get()
    timeout = svc.settings.api.read_your_writes_timeout_s
    deadline = time.monotonic() + timeout
    pause = FIRST_PAUSE_S
    while True:
        known, tds = client.definitions()
        missing = [
            f"{d.get('name')} v{d.get('version', 1)}"
            for d in workflows
            if known.get((str(d.get("name")), version_of(d))) != d
        ] + [str(t.get("name")) for t in taskdefs if tds.get(str(t.get("name"))) != t]
        if not missing:
            return
        if time.monotonic() > deadline:
            raise ApiError(
                503,
                f"the definitions were written, but the registry does not show "
                f"{', '.join(missing)} within {timeout:g}s "
                "(ES_SCHED_API_READ_YOUR_WRITES_TIMEOUT_S)",
            )
        time.sleep(pause)
        pause = min(pause * 2, LAST_PAUSE_S)


def version_of(doc: JSON) -> int:
    """A workflow definition's version as its registry key has it (1 when absent)."""
    version = doc.get("version", 1)
    return version if isinstance(version, int) else 1
