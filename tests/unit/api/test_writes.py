"""Read-your-writes for every write (``es_sched.api.writes``, ADR 56) with fakes: what is
waited for, and how the decider's verdict becomes an HTTP answer."""

from __future__ import annotations

from typing import Any

import pytest

from es_sched.api import writes
from es_sched.api.errors import ApiError
from es_sched.commands.client import Submitted
from es_sched.commands.prepare import UnknownDefinition
from es_sched.projections.read_your_writes import NotFreshYet, Token

pytestmark = pytest.mark.unit

TOKENS = {"a": "0:5", "b": "0:9", "c": "1:3", "late": "2:7"}


def settler(refusals: dict[str, tuple[str, bool]], waited: list[Token]) -> writes.Settler:
    def wait(token: Token, timeout_s: float) -> None:
        waited.append(token)
        if token.partition == 2:
            raise NotFreshYet("pg projection is at events[2]@40, the command's events end at 44")

    return writes.Settler(
        token_of=lambda sent: TOKENS.get(sent.workflow_id),
        wait=wait,
        refusal=lambda wf_id, cmd_id: refusals.get(cmd_id),
        timeout_s=2.5,
    )


def test_one_wait_per_partition_for_its_last_command_then_each_verdict() -> None:
    waited: list[Token] = []
    s = settler({"cb": ("workflow is TERMINATED", False)}, waited)
    verdicts = s.settle([Submitted("a", "ca"), Submitted("b", "cb"), Submitted("c", "cc")])
    assert sorted(waited, key=lambda t: t.partition) == [Token(0, 9), Token(1, 3)]
    assert [(v.workflow_id, v.refused, v.token) for v in verdicts] == [
        ("a", None, "0:5"),
        ("b", "workflow is TERMINATED", "0:9"),
        ("c", None, "1:3"),
    ]


def test_a_wait_that_runs_out_is_a_503_with_the_reason_and_the_token() -> None:
    with pytest.raises(ApiError) as caught:
        settler({}, []).settle([Submitted("late", "cl")])
    assert caught.value.status == 503 and caught.value.token == "2:7"
    assert "2.5s" in caught.value.message and "events[2]@40" in caught.value.message


def test_a_command_without_a_token_is_never_a_silent_success() -> None:
    with pytest.raises(ApiError) as caught:
        settler({}, []).settle([Submitted("unknown", "cu")])
    assert caught.value.status == 503


@pytest.mark.parametrize(
    ("refusal", "status"),
    [(("unknown workflow 'a': terminate_workflow refused", True), 404), (("paused", False), 409)],
)
def test_a_refused_action_is_404_without_history_and_409_inside_it(
    refusal: tuple[str, bool], status: int
) -> None:
    verdict = writes.Verdict(Submitted("a", "ca"), "0:5", refused=refusal[0], no_history=refusal[1])
    error = writes.refusal_error("terminate", verdict)
    assert error is not None and error.status == status and refusal[0] in error.message
    assert error.token == "0:5"
    assert writes.refusal_error("terminate", writes.Verdict(Submitted("a", "ca"), "0:5")) is None


def test_unknown_definition_speaks_http_not_the_cli() -> None:
    error = writes.unknown_definition(UnknownDefinition("media", 3, needed_by="outer"))
    assert error.status == 404
    assert "'media' version 3" in error.message and "'outer'" in error.message
    assert "POST /api/metadata/workflow" in error.message and "es-sched" not in error.message


class Registry:
    """``CommandClient.definitions`` that shows the pushed documents from its ``shows_at``th
    call on."""

    def __init__(self, shows_at: int) -> None:
        self.calls, self.shows_at = 0, shows_at

    def definitions(self) -> tuple[dict[tuple[str, int], Any], dict[str, Any]]:
        self.calls += 1
        if self.calls < self.shows_at:
            return {("flow", 1): {"name": "flow", "version": 1, "old": True}}, {}
        return {("flow", 1): FLOW}, {"step": STEP}


FLOW = {"name": "flow", "version": 1, "tasks": []}
STEP = {"name": "step", "retryCount": 0}


class Svc:
    def __init__(self, registry: Registry, timeout_s: float) -> None:
        self.registry = registry

        class Commands:
            def get(self) -> Registry:
                return registry

        class Api:
            read_your_writes_timeout_s = timeout_s

        class Settings:
            api = Api()

        self.commands, self.settings = Commands(), Settings()


def test_a_registration_answers_once_the_registry_holds_it() -> None:
    registry = Registry(shows_at=3)
    writes.registered(Svc(registry, 10.0), [FLOW], [STEP])  # type: ignore[arg-type]
    assert registry.calls == 3  # the older version did not count


def test_a_registration_the_registry_never_shows_is_a_503() -> None:
    with pytest.raises(ApiError) as caught:
        writes.registered(Svc(Registry(shows_at=10**9), 0.05), [FLOW], [])  # type: ignore[arg-type]
    assert caught.value.status == 503 and "flow v1" in caught.value.message
