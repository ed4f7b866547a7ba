"""``testkit.simulated``'s comparison: what it forgives (ids, times) and what it does not."""

from __future__ import annotations

from datetime import timedelta

import pytest

from es_sched import bootstrap
from es_sched.domain.events import Event
from es_sched.simulate import EPOCH, Simulation
from testkit.simulated import Script, assert_same, family, simulated
from tests.unit.domain.harness import task, workflow

PARENT = workflow(
    task("kick", type_="START_WORKFLOW", inputParameters={"startWorkflow": {"name": "child"}}),
    task("nap", type_="WAIT", inputParameters={"duration": "30s"}),
    task("a", inputParameters={"child": "${kick.output.workflowId}"}),
    name="parent",
)
CHILD = workflow(task("c"), name="child")
SCRIPT: Script = [{"ref": "a", "output": {"v": 1}}, {"ref": "c", "output": {"w": 2}}]


def shifted(script: Script) -> list[list[Event]]:
    """The same run with other ids and another clock: a workflow run first draws ids, and the
    run starts a day later."""
    sim = Simulation(
        [PARENT, CHILD],
        script=script,
        scripts=bootstrap.script_engine(),
        start=EPOCH + timedelta(days=1),
    )
    sim.run(workflow(task("z"), name="warm_up"), {})
    result = sim.run(PARENT, {})
    return family({wf: run.events for wf, run in sim.workflows.items()}, result["workflowId"])


def test_other_ids_and_times_are_the_same_history() -> None:
    mine = simulated([PARENT, CHILD], [], SCRIPT, {})
    assert [len(h) for h in mine] == [len(h) for h in shifted(SCRIPT)]
    assert len(mine) == 2  # the started workflow is in the family
    assert_same(shifted(SCRIPT), mine)


def test_another_output_is_a_difference_named_by_its_path() -> None:
    other: Script = [{"ref": "a", "output": {"v": 9}}, {"ref": "c", "output": {"w": 2}}]
    with pytest.raises(AssertionError, match=r"payload\.output\.v: Kafka 9, simulate 1"):
        assert_same(shifted(other), simulated([PARENT, CHILD], [], SCRIPT, {}))
