"""``domain.intake``: the one rule of what the decider accepts, before it decides (ADR 75)."""

from __future__ import annotations

import pytest

from es_sched.domain import commands as c
from es_sched.domain.effects import child_start_id
from es_sched.domain.ids import workflow_id_for_command
from es_sched.domain.intake import input_refusal, record_refusal

pytestmark = pytest.mark.unit

CAP = 256 * 1024


def start(command_id: str, workflow_id: str | None = None) -> c.StartWorkflow:
    wf = workflow_id if workflow_id is not None else workflow_id_for_command(command_id)
    return c.StartWorkflow(command_id, wf, name="flow", version=1, input={})


def test_the_cap_is_inclusive_and_an_empty_record_is_refused() -> None:
    assert record_refusal(CAP, CAP) is None
    assert record_refusal(1, CAP) is None
    assert record_refusal(CAP + 1, CAP) == f"record is {CAP + 1} bytes, over the cap of {CAP} bytes"
    assert record_refusal(0, CAP) == "empty record"


def test_a_start_is_accepted_under_its_own_key_with_the_id_its_command_gives() -> None:
    ok = start("cmd-1")
    assert input_refusal(ok.workflow_id, ok) is None
    child = start(child_start_id("child-wf"), "child-wf")
    assert input_refusal("child-wf", child) is None


def test_a_forged_workflow_id_or_a_foreign_key_is_refused_with_its_reason() -> None:
    forged = start("cmd-1", "a-workflow-id-of-my-choosing")
    reason = input_refusal(forged.workflow_id, forged)
    assert reason is not None and "uuid5 of its command_id" in reason
    ok = start("cmd-2")
    assert input_refusal("other", ok) == (
        f"record key 'other' is not its workflow_id {ok.workflow_id!r}"
    )


def test_the_key_rule_holds_for_every_input_not_only_starts() -> None:
    report = c.ReportCompleted(
        "r-1", "wf-1", task_id="t", attempt=1, worker_id="w", lease_epoch=1, lease_token="x"
    )
    assert input_refusal("wf-1", report) is None
    assert input_refusal("wf-2", report) is not None
