"""Hostile workflow scripts on the real stack (ADR 76): one decider process on private topics.

Hostile INLINE scripts (an infinite loop, a 1 GB allocation, a reach for the host's globals) and
a javascript SWITCH whose regular expression backtracks past any limit (QuickJS never
interrupts its matcher: the sandbox's wall-time deadline kills the child, and the decider's
log says so) are started first, ordinary workflows of the same definitions after them. Each
hostile one ends FAILED with its breach recorded in ``task.failed`` (or, for the globals,
COMPLETED finding nothing); the ordinary ones, decided after them by the same decider process,
complete. The audit over the log ends the test: the breaches replay from the record.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from es_sched import bootstrap
from es_sched.audit.check import check
from es_sched.audit.read import read_log
from es_sched.domain.events import Event, TaskFailed
from es_sched.domain.scripts import breach, recorded_breach
from testkit.runtime import Env, Role, final_status, read_events, roles
from testkit.wait import wait_until

pytestmark = pytest.mark.integration
TIME = "exceeded its time limit of 100 ms"
MEMORY = "exceeded its memory limit of 32 MiB"
CALC = {
    "name": "sandbox_calc",
    "version": 1,
    "schemaVersion": 2,
    "tasks": [
        {
            "name": "calc",
            "taskReferenceName": "calc",
            "type": "INLINE",
            "inputParameters": {
                "evaluatorType": "javascript",
                "expression": "${workflow.input.script}",
                "n": "${workflow.input.n}",
            },
        }
    ],
    "outputParameters": {"result": "${calc.output.result}"},
}
ROUTE_SCRIPT = "/(a+)+$/.test($.text) ? 'repeated' : 'other'"
ROUTE = {
    "name": "sandbox_route",
    "version": 1,
    "schemaVersion": 2,
    "tasks": [
        {
            "name": "route",
            "taskReferenceName": "route",
            "type": "SWITCH",
            "evaluatorType": "javascript",
            "expression": ROUTE_SCRIPT,
            "inputParameters": {"text": "${workflow.input.text}"},
            "decisionCases": {
                "repeated": [
                    {
                        "name": "mark",
                        "taskReferenceName": "mark",
                        "type": "SET_VARIABLE",
                        "inputParameters": {"routed": "repeated"},
                    }
                ]
            },
        }
    ],
}
LOOP = "while (true) {}"
BOMB = "new Array(1024 * 1024 * 1024).fill(1).length"
GLOBALS = (
    "[typeof require, typeof process, typeof std, typeof os,"
    " (function(){}).constructor('return typeof print + typeof scriptArgs')()].join(' ')"
)
EVIL_TEXT = "a" * 40 + "b"


@pytest.fixture(scope="module")
def decider() -> Iterator[tuple[Env, Role]]:
    env = Env(partitions=2)
    env.create()
    env.push(CALC, [])
    env.push(ROUTE, [])
    with roles(env, "decider") as (role,):
        yield env, role


def ended(env: Env, ids: list[str]) -> dict[str, list[Event]]:
    found = read_events(env)
    return {wf: found.get(wf, []) for wf in ids}


def failure(events: list[Event]) -> str:
    reasons = [e.payload.reason for e in events if isinstance(e.payload, TaskFailed)]
    assert len(reasons) == 1, reasons
    return reasons[0]


def test_hostile_scripts_fail_their_workflow_and_the_decider_goes_on(
    decider: tuple[Env, Role],
) -> None:
    env, role = decider
    hostile = [
        *env.submit("sandbox_calc", [{"script": s, "n": 1} for s in (LOOP, BOMB, GLOBALS)]),
        *env.submit("sandbox_route", [{"text": EVIL_TEXT}]),
    ]
    # submitted after the hostile ones: the same decider reaches them only past those
    ordinary = [
        *env.submit("sandbox_calc", [{"script": "$.n * 2", "n": 21}]),
        *env.submit("sandbox_route", [{"text": "aaaa"}, {"text": "abab"}]),
    ]
    ids = [s.workflow_id for s in (*hostile, *ordinary)]

    def every_one_ended() -> bool:
        return all(final_status(h) not in ("", "RUNNING") for h in ended(env, ids).values())

    wait_until(
        every_one_ended,
        120,
        lambda: f"statuses {[final_status(h) for h in ended(env, ids).values()]}",
    )
    runs = ended(env, ids)
    loop, bomb, globals_, evil, calc, repeated, other = (runs[wf] for wf in ids)

    calc_inputs = {"evaluatorType": "javascript", "n": 1}
    assert final_status(loop) == "FAILED"
    assert failure(loop) == breach(TIME, LOOP, {**calc_inputs, "expression": LOOP})
    assert final_status(bomb) == "FAILED"
    assert failure(bomb) == breach(MEMORY, BOMB, {**calc_inputs, "expression": BOMB})
    assert final_status(globals_) == "COMPLETED"
    assert globals_[-1].payload.output == {  # type: ignore[attr-defined]
        "result": "undefined undefined undefined undefined undefinedundefined"
    }
    # what proves the sandbox's deadline fired (not QuickJS's interrupt): the kill, logged
    role.wait_log("killed the script sandbox process", 10)
    assert final_status(evil) == "FAILED"
    reason = failure(evil)
    assert reason == "switch evaluation failed: " + breach(TIME, ROUTE_SCRIPT, {"text": EVIL_TEXT})
    assert recorded_breach(reason) is not None

    assert final_status(calc) == "COMPLETED"
    assert calc[-1].payload.output == {"result": 42}  # type: ignore[attr-defined]
    assert [final_status(repeated), final_status(other)] == ["COMPLETED", "COMPLETED"]
    assert role.proc.poll() is None  # one decider process decided them all

    report = check(read_log(env.settings), True, bootstrap.script_engine())
    assert report.ok, "\n".join(v.line() for v in report.violations[:20])
    assert set(ids) <= set(report.states)
