"""The dispatcher's part of the blacklist (ADR 58) without a broker: the ends it reads of the
tasks it placed are counted by ``es_sched.blacklist.blame``; a blacklisting is produced to the
config topic and applied at once; the gauges say so."""

from __future__ import annotations

import orjson

from es_sched.dispatch import config as dc
from es_sched.serialization.partial import TaskEnd
from tests.unit.dispatch.fakes import OnFakes, on_fakes, ready


def queue(f: OnFakes, task_id: str) -> None:
    f.d.journal.track(ready(task_id), 2)
    f.d.core.enqueue(ready(task_id))


def place_and_end(f: OnFakes, task_id: str, terminal: bool, host_fault: bool) -> None:
    queue(f, task_id)
    f.d.step(0)
    assert f.d.core.in_flight[task_id].placement.worker_id == "w1"
    f.d._on_event(TaskEnd(task_id, "task.failed", 0, f"{task_id} failed", terminal, host_fault))


def config_records(f: OnFakes) -> list[tuple[str, ...]]:
    return [entry for entry in f.out.log if entry[:2] == ("produce", "p.config")]


def test_input_errors_are_not_counted_and_host_faults_blacklist_through_the_config_topic() -> None:
    f = on_fakes()
    for i in range(10):
        place_and_end(f, f"bad{i}", terminal=True, host_fault=False)
        place_and_end(f, f"flaky{i}", terminal=False, host_fault=False)
    assert config_records(f) == [] and not f.d.core.fleet.blacklisted("w1", f.d.clock())
    for i in range(5):
        place_and_end(f, f"host{i}", terminal=False, host_fault=True)
    assert config_records(f) == [("produce", "p.config", "blacklist:w1")]
    assert f.d.core.fleet.blacklisted("w1", f.d.clock())  # applied before the record returns
    f.d._blacklist_gauges(f.d.clock())
    assert f.d.m_blacklisted.value(worker="w1", pool="default") == 1
    queue(f, "waits")
    f.d._blacklist_gauges(f.d.clock())
    labels = {"task_type": "encode", "pool": "default", "reason": "blacklisted"}
    assert f.d.m_unplaceable.value(**labels) == 1


def test_a_lift_read_from_the_config_topic_places_again() -> None:
    f = on_fakes()
    for i in range(5):
        place_and_end(f, f"host{i}", terminal=False, host_fault=True)
    queue(f, "waits")
    f.d.step(0)
    assert "waits" not in f.d.core.in_flight
    lift = {"state": "lifted", "at": f.d.clock().isoformat(), "by": "alice"}
    f.d._configure(dc.parse("blacklist:w1", orjson.dumps(lift)))  # as the config reader does
    f.d.step(0)
    assert "waits" in f.d.core.in_flight
    f.d._blacklist_gauges(f.d.clock())
    assert f.d.m_blacklisted.value(worker="w1", pool="default") == 0
