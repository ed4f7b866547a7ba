"""``domain.intake``: the one rule of what the decider accepts, before it decides (ADR 75)."""

from __future__ import annotations

import json

import pytest

from es_sched.domain import commands as c
from es_sched.domain.effects import child_start_id
from es_sched.domain.ids import workflow_id_for_command
from es_sched.domain.intake import (
    MAX_DEPTH,
    NUL_REASON,
    input_refusal,
    nesting,
    record_refusal,
)

pytestmark = pytest.mark.unit

CAP = 256 * 1024


def start(command_id: str, workflow_id: str | None = None) -> c.StartWorkflow:
    wf = workflow_id if workflow_id is not None else workflow_id_for_command(command_id)
    return c.StartWorkflow(command_id, wf, name="flow", version=1, input={})


def test_the_cap_is_inclusive_and_an_empty_record_is_refused() -> None:
    assert record_refusal(b"x" * CAP, CAP) is None
    assert record_refusal(b"{}", CAP) is None
    over = f"record is {CAP + 1} bytes, over the cap of {CAP} bytes"
    assert record_refusal(b"x" * (CAP + 1), CAP) == over
    assert record_refusal(b"", CAP) == "empty record"


@pytest.mark.parametrize(
    ("text", "holds"),
    [
        ({"id": "a\x00b"}, True),
        ({"a": {"b": ["\x00"]}}, True),
        ({"\x00key": 1}, True),
        ({"id": "\\u0000"}, False),  # a backslash, then the letters u0000: no NUL
        ({"id": "\\\x00"}, True),  # a backslash, then a NUL
        ({"id": "u0000 \\"}, False),
    ],
)
def test_a_nul_in_any_string_is_refused_and_only_a_nul(text: object, holds: bool) -> None:
    data = json.dumps(text).encode()
    assert json.loads(data) == text
    assert (record_refusal(data, CAP) == NUL_REASON) is holds


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


def test_nesting_over_the_limit_is_refused_by_the_bytes_alone() -> None:
    def nested(depth: int) -> bytes:
        return b'{"d":' * depth + b"1" + b"}" * depth

    assert record_refusal(nested(MAX_DEPTH), CAP) is None
    too_deep = f"record is nested {MAX_DEPTH + 1} levels deep, over the limit of {MAX_DEPTH}"
    assert record_refusal(nested(MAX_DEPTH + 1), CAP) == too_deep
    # Brackets inside strings (escaped quotes too) are text, not nesting.
    text = json.dumps({"s": '\\"{[' * 500, "a": [[[1]]]}).encode()
    assert nesting(text) == 4 and record_refusal(text, CAP) is None  # the object, 3 arrays
    wide = json.dumps({"items": [{"k": [i]} for i in range(300)]}).encode()
    assert nesting(wide) == 4
