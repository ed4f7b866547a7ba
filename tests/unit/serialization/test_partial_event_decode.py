"""Events read for a field or two (``serialization.partial``): the task an event ends or whose
lease it ends (the dispatcher), the workflow a final event ends (a client's ``--wait``)."""

from __future__ import annotations

import orjson
import pytest

from es_sched.errors import SchemaError
from es_sched.serialization.partial import (
    LEASE_ENDED,
    TASK_ENDS,
    TaskEnd,
    decode_task_end,
    decode_workflow_end,
)


def test_every_end_of_a_task_attempt_names_its_task() -> None:
    for kind in TASK_ENDS:
        raw = orjson.dumps({"type": kind, "payload": {"task_id": "t"}})
        assert decode_task_end(raw) == TaskEnd("t", kind, 0)
    assert decode_task_end(orjson.dumps({"type": "task.started", "payload": {}})) is None
    assert decode_task_end(orjson.dumps([1])) is None
    with pytest.raises(SchemaError):
        decode_task_end(orjson.dumps({"type": "task.failed", "payload": {}}))
    with pytest.raises(SchemaError):
        decode_task_end(b"{")
    with pytest.raises(SchemaError):
        decode_task_end(None)


def test_a_task_end_tells_failures_from_completions() -> None:
    failed = orjson.dumps({"type": "task.failed", "payload": {"task_id": "t1", "reason": "x"}})
    assert decode_task_end(failed) == ("t1", "task.failed", 0, "x", False, False)
    host = {"task_id": "t3", "reason": "disk", "host_fault": True}
    found = decode_task_end(orjson.dumps({"type": "task.failed", "payload": host}))
    assert found == TaskEnd("t3", "task.failed", 0, "disk", False, True)
    terminal = {"task_id": "t4", "reason": "no file", "terminal": True}
    found = decode_task_end(orjson.dumps({"type": "task.failed", "payload": terminal}))
    assert found is not None and found.terminal and not found.host_fault
    done = orjson.dumps({"type": "task.completed", "payload": {"task_id": "t2", "output": {}}})
    assert decode_task_end(done) == TaskEnd("t2", "task.completed", 0)
    assert decode_task_end(orjson.dumps({"type": "task.progressed", "payload": {}})) is None


def test_a_lease_expired_event_names_its_task_and_epoch() -> None:
    expired = {"type": LEASE_ENDED, "payload": {"task_id": "t1", "lease_epoch": 3}}
    assert decode_task_end(orjson.dumps(expired)) == TaskEnd("t1", "task.lease_expired", 3)
    for epoch in (None, True, "3", 3.5):
        bad = {"type": LEASE_ENDED, "payload": {"task_id": "t", "lease_epoch": epoch}}
        with pytest.raises(SchemaError, match="lease_epoch"):
            decode_task_end(orjson.dumps(bad))
    with pytest.raises(SchemaError):
        decode_task_end(orjson.dumps({"type": LEASE_ENDED, "payload": {"task_id": "t"}}))


def test_a_workflow_end_names_its_workflow_and_anything_else_is_skipped() -> None:
    def raw(type_: str, workflow_id: object = "wf") -> bytes:
        return orjson.dumps({"type": type_, "workflow_id": workflow_id})

    for kind in ("workflow.completed", "workflow.ended", "workflow.rejected"):
        assert decode_workflow_end(raw(kind)) == "wf"
    assert decode_workflow_end(raw("workflow.paused")) is None
    assert decode_workflow_end(raw("workflow.completed", 7)) is None
    for junk in (b"not json", b"[1]", b"", None, b"\xff"):
        assert decode_workflow_end(junk) is None
