"""The events reader without a broker: only the ends the dispatcher acts on are handed over."""

from __future__ import annotations

import orjson

from es_sched.dispatch.readers.events import EventReader
from es_sched.serialization.partial import TaskEnd
from tests.unit.dispatch.fakes import FakeTail, msg

TOPIC = "p.events"


def event(type_: str, **payload: object) -> bytes:
    return orjson.dumps({"type": type_, "payload": payload})


def test_task_ends_and_lease_ends_are_handed_over_and_the_rest_skipped() -> None:
    tail = FakeTail()
    tail.records = [
        msg(TOPIC, event("task.started", task_id="a")),
        msg(TOPIC, b"{not json"),  # logged: the decider dead-letters its own faults
        msg(TOPIC, event("task.failed", task_id="a", reason="x")),
        msg(TOPIC, event("task.lease_expired", task_id="b", lease_epoch=2)),
    ]
    assert list(EventReader(tail).poll()) == [  # type: ignore[arg-type]
        TaskEnd("a", "task.failed", 0, "x"),
        TaskEnd("b", "task.lease_expired", 2),
    ]
