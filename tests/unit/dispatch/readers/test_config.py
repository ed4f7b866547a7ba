"""The config reader without a broker: changes handed over, a bad record dead-lettered."""

from __future__ import annotations

from es_sched.dispatch.readers.config import ConfigReader
from es_sched.serialization.config import ConfigChange, encode
from tests.unit.dispatch.fakes import FakeOutput, FakeTail, msg

TOPIC = "p.config"


def test_changes_are_handed_over_and_a_bad_record_is_dead_lettered() -> None:
    tail, out = FakeTail(), FakeOutput()
    tail.records = [
        msg(TOPIC, encode({"rate": 5}), key="rate:type:t"),
        msg(TOPIC, b'{"rate": 0}', key="rate:type:t"),
        msg(TOPIC, None, key="pool:t"),
    ]
    assert list(ConfigReader(tail, out).poll()) == [  # type: ignore[arg-type]
        ConfigChange("rate:type", "t", {"rate": 5}),
        ConfigChange("pool", "t", None),
    ]
    assert len(out.dead_letters) == 1
