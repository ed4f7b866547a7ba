"""The decider and the checker judge an input by one rule (``domain.intake``, ADR 75).

Each record below goes through the decider's own ``handle`` (on a fake registry, no broker)
and through the checker's reader; the decider dead-letters exactly the ones the checker holds
as not accepted. The case that set this up: a 300 KB StartWorkflow, well formed and under its
own key, is over the 256 KiB command cap, so the decider dead-letters it and writes no event;
the checker must not call it lost work (I1).
"""

from __future__ import annotations

from typing import Any

import pytest

from es_sched.audit.check import check
from es_sched.audit.log import At, Log
from es_sched.audit.read import _input
from es_sched.bootstrap import script_engine
from es_sched.domain import commands as c
from es_sched.domain.effects import child_start_id
from es_sched.domain.ids import workflow_id_for_command
from es_sched.runtime.decider import Decider
from es_sched.serialization import encode_input
from testkit.settings import private_vars, settings_with
from tests.unit.audit.recorded import COMMANDS, TWO_TASKS, Recording, recorded
from tests.unit.dispatch.fakes import msg

pytestmark = pytest.mark.unit

CAP = 256 * 1024


class Registry:
    def poll(self) -> None:
        return None

    def workflow(self, name: str, version: int | None = None) -> dict[str, Any] | None:
        return TWO_TASKS if name == TWO_TASKS["name"] else None

    def taskdefs_for(self, definition: dict[str, Any]) -> list[dict[str, Any]]:
        return []


def start(command_id: str, workflow_id: str | None = None, blob: str = "") -> c.StartWorkflow:
    wf = workflow_id if workflow_id is not None else workflow_id_for_command(command_id)
    return c.StartWorkflow(command_id, wf, name=TWO_TASKS["name"], version=1, input={"b": blob})


def records() -> dict[str, tuple[str, bytes]]:
    """(key, value) of each case, by name."""
    ok, big = start("ok"), start("big", blob="x" * 300_000)
    forged = start("forged", "a-workflow-id-of-my-choosing")
    child = start(child_start_id("child-wf"), "child-wf")
    cancel = c.CancelWorkflow("cancel-1", ok.workflow_id)
    nul = c.CancelWorkflow("cancel-2", "nobody\x00")
    return {
        "valid start": (ok.workflow_id, encode_input(ok)),
        "300 KB start": (big.workflow_id, encode_input(big)),
        "child start": ("child-wf", encode_input(child)),
        "forged workflow id": (forged.workflow_id, encode_input(forged)),
        "foreign key": ("someone-else", encode_input(cancel)),
        "NUL in an id": (nul.workflow_id, encode_input(nul)),
        "empty": (ok.workflow_id, b""),
        "undecodable": (ok.workflow_id, b"\xff\xfe not json"),
        "unknown type": (ok.workflow_id, b'{"type":"workflow.nuke","v":1}'),
    }


def decider() -> Decider:
    d = Decider(settings_with(private_vars("p")), script_engine())
    d.registry = Registry()  # type: ignore[assignment]
    return d


def test_the_decider_dead_letters_exactly_what_the_checker_does_not_accept() -> None:
    d = decider()
    assert d.run_settings.command_max_bytes == CAP
    dead, accepted = {}, {}
    for n, (name, (key, value)) in enumerate(records().items()):
        out = d.handle(msg(COMMANDS, value, n, key), {}, {})
        dead[name] = [r.topic for r in out] == [d.topics.dead_letters]
        accepted[name] = _input(value, key, At(COMMANDS, 0, n), CAP).accepted
    assert dead == {name: not ok for name, ok in accepted.items()}
    assert [name for name, ok in accepted.items() if ok] == ["valid start", "child start"]


def test_an_oversize_start_the_decider_dead_lettered_is_not_lost_work() -> None:
    d = decider()
    key, value = records()["300 KB start"]
    assert len(value) > CAP
    [letter] = d.handle(msg(COMMANDS, value, 7, key), {}, {})
    reason = dict(letter.headers or [])["error.reason"]
    assert reason == f"record is {len(value)} bytes, over the cap of {CAP} bytes".encode()
    log: Log = recorded(Recording(TWO_TASKS).finish())  # a workflow that ran, beside it
    log.inputs.append(_input(value, key, At(COMMANDS, 0, 7), CAP))
    report = check(log, idle=True)
    assert report.ok, [v.line() for v in report.violations]
    assert report.counts["refused_inputs"] == 1
    # The same record under a larger cap is accepted and unanswered: lost, as it should be.
    log.inputs[-1] = _input(value, key, At(COMMANDS, 0, 7), 2 * CAP)
    assert [v.invariant for v in check(log, idle=True).violations] == ["I1"]
