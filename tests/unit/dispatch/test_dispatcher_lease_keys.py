"""Lease tokens sealed to the worker's key (ADR 74), on a dispatcher without a broker: each
assignment's token opens only with the key of the worker it names; a worker without a key gets
nothing unless clear tokens are allowed; a worker that comes back with a new key has the
leases it does not run taken back at once."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from es_sched.dispatch.dispatcher import KEY_SILENCE_HEARTBEATS
from es_sched.domain import commands as c
from es_sched.kafka.topics import assignment_topic
from es_sched.serialization import decode_input, sealed, wire
from tests.unit.dispatch.fakes import (
    LEASE_KEY,
    T0,
    OnFakes,
    msg,
    on_fakes,
    ready_raw,
    w1_status,
)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


def dispatcher(env: dict[str, str] | None = None, clock: Clock | None = None) -> OnFakes:
    f = on_fakes(env=env, clock=clock or Clock())
    f.d.pool_topics.add(assignment_topic("p", "default"))  # known: a status creates no topic
    return f


def after_silence(f: OnFakes) -> timedelta:
    """Long enough for a worker's key to be silent before another is believed."""
    return timedelta(seconds=KEY_SILENCE_HEARTBEATS * f.d.dispatch_settings.heartbeat_s + 1)


def to_workers(f: OnFakes) -> list[wire.Record]:
    return [wire.decode(v) for t, v in f.out.values if t == "p.assignments"]


def to_decider(f: OnFakes) -> list[c.Input]:
    return [decode_input(v or b"") for t, v in f.out.values if t == f.d.topics.task_results]


def leased(f: OnFakes, task_id: str = "a", offset: int = 7) -> wire.Assignment:
    f.ready.records.append(msg(f.d.topics.ready, ready_raw(task_id), offset=offset))
    f.d.step(0)
    found = [r for r in to_workers(f) if isinstance(r, wire.Assignment) and r.task_id == task_id]
    return found[-1]


def test_the_token_reaches_only_the_worker_it_names() -> None:
    f = dispatcher()
    f.status.records.append(w1_status(f.d, T0))
    a = leased(f)
    [granted] = [i for i in to_decider(f) if isinstance(i, c.DispatchTask)]
    assert granted.lease_token == "tok" and sealed.is_sealed(a.lease_token)
    assert "tok" not in a.lease_token
    assert sealed.opened(a, LEASE_KEY).lease_token == granted.lease_token
    other = sealed.LeaseKey()  # another worker reading the same partition
    with pytest.raises(sealed.SealError):
        sealed.opened(a, other)
    assert f.d.m_clear_tokens.value() == 0


def test_a_worker_without_a_key_gets_nothing_by_default() -> None:
    f = dispatcher()
    f.d.lease_keys.forget("w1")  # a worker never heard with a key
    f.status.records.append(w1_status(f.d, T0, lease_key=""))
    f.ready.records.append(msg(f.d.topics.ready, ready_raw("a"), offset=7))
    f.d.step(0)
    assert "w1" not in f.d.core.fleet.workers
    assert to_workers(f) == [] and f.d.core.leases.leases == {}


def test_clear_tokens_when_allowed_are_counted() -> None:
    f = dispatcher({"ES_SCHED_DISPATCH_CLEAR_LEASE_TOKENS": "true"})
    f.d.lease_keys.forget("w1")  # a worker never heard with a key
    f.status.records.append(w1_status(f.d, T0, lease_key=""))
    a = leased(f)
    assert a.lease_token == "tok" and f.d.m_clear_tokens.value() == 1


def test_a_published_key_that_is_no_key_is_a_worker_without_one() -> None:
    f = dispatcher()
    f.status.records.append(w1_status(f.d, T0, lease_key="A" * 43 + "="))  # 32 bytes: a key
    f.d.read_inputs(0)
    assert "w1" in f.d.core.fleet.workers
    short = wire.encode(
        wire.WorkerStatus("w2", "default", "1.0", ["encode"], 1.0, 100, lease_key="A" * 10)
    )
    f.status.records.append(msg(f.d.topics.worker_status, short, key="w2"))
    f.d.read_inputs(0)  # refused by the schema: a dead letter, not a crash
    assert "w2" not in f.d.core.fleet.workers and f.out.dead_letters


def test_a_worker_back_with_a_new_key_has_what_it_does_not_run_taken_back() -> None:
    clock = Clock()
    f = dispatcher(clock=clock)
    f.status.records.append(w1_status(f.d, T0))
    first = leased(f, "a", 7)
    kept = leased(f, "b", 8)  # listed by the new process (a gateway restores it from its store)
    restarted = sealed.LeaseKey()
    clock.now = T0 + after_silence(f)  # the old process's key silent since: a restart
    f.status.records.append(w1_status(f.d, clock.now, running=["b"], lease_key=restarted.public))
    f.d.step(0)
    cancels = [r for r in to_workers(f) if isinstance(r, wire.Cancel)]
    assert [(x.task_id, x.lease_epoch) for x in cancels] == [("a", first.lease_epoch)]
    assert cancels[0].reason == "worker restarted with a new lease key"
    expired = [i for i in to_decider(f) if isinstance(i, c.ExpireLease)]
    assert [(i.task_id, i.lease_epoch) for i in expired] == [("a", first.lease_epoch)]
    # the task went back to its queue and was granted again, sealed to the new key
    again = [r for r in to_workers(f) if isinstance(r, wire.Assignment) and r.task_id == "a"]
    assert len(again) == 2 and again[1].lease_epoch == first.lease_epoch + 1
    assert sealed.opened(again[1], restarted).lease_token == "tok"
    assert f.d.core.leases.leases["b"].epoch == kept.lease_epoch
    # not the worker's fault: no lease counted as lost against it
    assert f.d.core.fleet.workers["w1"].lease_lost_at is None
    assert f.d.m_rekeyed.value(pool="default") == 1


def test_the_same_key_again_takes_nothing_back() -> None:
    f = dispatcher()
    f.status.records.append(w1_status(f.d, T0))
    leased(f)
    f.status.records.append(w1_status(f.d, T0 + timedelta(seconds=1), running=["a"]))
    f.d.step(0)
    assert not [r for r in to_workers(f) if isinstance(r, wire.Cancel)]
    assert "a" in f.d.core.leases.leases
    assert f.d.m_rekeyed.value(pool="default") == 0


def test_a_dead_workers_key_is_forgotten_and_its_return_is_no_key_change() -> None:
    now = [T0]
    f = on_fakes(clock=lambda: now[0])
    f.d.pool_topics.add(assignment_topic("p", "default"))
    f.status.records.append(w1_status(f.d, T0))
    f.d.step(0)
    assert "w1" in f.d.lease_keys.keys
    now[0] = T0 + timedelta(seconds=f.d.dispatch_settings.dead_after_s + 1)
    f.d.step(0)
    assert f.d.m_worker_dead.value(pool="default") == 1 and "w1" not in f.d.lease_keys.keys
    f.status.records.append(w1_status(f.d, now[0], lease_key=sealed.LeaseKey().public))
    f.d.step(0)
    assert "w1" in f.d.lease_keys.keys and f.d.m_rekeyed.value(pool="default") == 0


def test_another_key_while_the_workers_key_is_live_is_ignored() -> None:
    """A worker of the pool publishing under w1's id with its own key, while w1 heartbeats:
    no take-back, no token sealed to the impostor's key, counted; a tombstone it writes first
    takes w1 out of placement only until w1's next heartbeat. Once w1's key has been silent
    long enough, a new key is a restart."""
    clock = Clock()
    f = dispatcher(clock=clock)
    f.status.records.append(w1_status(f.d, T0))
    a = leased(f, "a", 7)
    impostor = sealed.LeaseKey()
    clock.now = T0 + timedelta(seconds=1)
    f.status.records.append(msg(f.d.topics.worker_status, None, key="w1"))  # a tombstone
    f.status.records.append(w1_status(f.d, clock.now, lease_key=impostor.public))
    f.status.records.append(w1_status(f.d, clock.now, running=["a"]))  # w1's own heartbeat
    b = leased(f, "b", 8)
    assert not [r for r in to_workers(f) if isinstance(r, wire.Cancel)]
    assert f.d.m_contested.value(pool="default") == 1 and f.d.m_rekeyed.value() == 0
    for x in (a, b):
        assert sealed.opened(x, LEASE_KEY).lease_token == "tok"
        with pytest.raises(sealed.SealError):
            sealed.opened(x, impostor)
    clock.now = T0 + after_silence(f)
    f.status.records.append(w1_status(f.d, clock.now, lease_key=impostor.public))
    f.d.step(0)
    assert f.d.m_rekeyed.value(pool="default") == 1
