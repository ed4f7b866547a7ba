"""A script engine that cannot start is the host's fault (ADR 76): the decider lets it end the
batch (nothing committed, the input decided again later) and dead-letters nothing."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from es_sched.domain import commands as c
from es_sched.domain.ids import workflow_id_for_command
from es_sched.domain.scripts import ScriptResult
from es_sched.errors import ScriptSandboxUnavailable
from es_sched.runtime.decider import Decider
from es_sched.serialization import encode_input
from testkit.settings import private_vars, settings_with

pytestmark = pytest.mark.unit
INLINE = {
    "name": "calc",
    "version": 1,
    "tasks": [
        {
            "name": "calc",
            "taskReferenceName": "calc",
            "type": "INLINE",
            "inputParameters": {"evaluatorType": "javascript", "expression": "1"},
        }
    ],
}


class NoSandbox:
    def evaluate(self, expression: str, bindings: Mapping[str, Any]) -> ScriptResult:
        raise ScriptSandboxUnavailable("the script sandbox process did not start")


class Msg:
    """The parts of a consumed record ``Decider.handle`` reads."""

    def __init__(self, inp: c.Input) -> None:
        self._value, self._key = encode_input(inp), inp.workflow_id.encode()

    def value(self) -> bytes:
        return self._value

    def key(self) -> bytes:
        return self._key

    def topic(self) -> str:
        return "p.commands"

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return 0

    def headers(self) -> list[tuple[str, bytes]]:
        return []


def test_a_sandbox_that_cannot_start_ends_the_batch_without_a_dead_letter() -> None:
    decider = Decider(settings_with(private_vars("p")), NoSandbox())
    start = c.StartWorkflow(
        "start-host", workflow_id_for_command("start-host"), name="calc", definition=INLINE
    )
    with pytest.raises(ScriptSandboxUnavailable):
        decider.handle(Msg(start), {}, {})  # type: ignore[arg-type]
    assert decider.stats.get("dead_letters", 0) == 0
