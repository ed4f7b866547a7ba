"""The worker-status reader without a broker: what each record of the topic is handed over as."""

from __future__ import annotations

from es_sched.dispatch.readers.worker_status import Report, StatusReader, WorkerLeft
from es_sched.serialization import wire
from tests.unit.dispatch.fakes import T0, FakeOutput, FakeTail, msg

TOPIC = "p.worker-status"


def test_reports_progress_and_a_worker_leaving() -> None:
    tail, out = FakeTail(), FakeOutput()
    status = wire.WorkerStatus("w1", "default", "1.0", ["encode"], 4, 8000, sent_at=T0.isoformat())
    unsent = wire.WorkerStatus("w2", "default", "1.0", ["encode"], 4, 8000)
    progress = wire.Progress("w1", "t1", 1, 50.0)
    tail.records = [
        msg(TOPIC, wire.encode(status), key="w1"),
        msg(TOPIC, wire.encode(unsent), key="w2"),
        msg(TOPIC, wire.encode(progress), key="w1/t1"),
        msg(TOPIC, None, key="w1/t1"),  # a finished task's progress: nothing
        msg(TOPIC, None, key="w2"),
    ]
    reader = StatusReader(tail, out)  # type: ignore[arg-type]
    assert list(reader.poll()) == [
        Report(status, T0),
        Report(unsent, None),
        progress,
        WorkerLeft("w2"),
    ]
    assert out.dead_letters == []


def test_a_record_that_does_not_decode_is_dead_lettered_and_another_kind_skipped() -> None:
    tail, out = FakeTail(), FakeOutput()
    cancel = wire.Cancel("w1", "t1", 1, "canceled")
    tail.records = [msg(TOPIC, b"{not json", key="w1"), msg(TOPIC, wire.encode(cancel), key="w1")]
    assert list(StatusReader(tail, out).poll()) == []  # type: ignore[arg-type]
    assert len(out.dead_letters) == 1
