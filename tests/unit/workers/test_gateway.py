"""The gateway worker's demand (ADR 24 a), without a broker: what its status announces follows
the HTTP workers' polls, and a held task no poller asks for goes back after the demand
window. Reports go to a recording stand-in for the SDK's ``Reporter``."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from es_sched.domain import commands as c
from es_sched.serialization import sealed, wire
from es_sched.settings import Settings
from es_sched.workers.gateway.leases import HeldLease
from es_sched.workers.gateway.worker import Gateway, _Held
from testkit.settings import settings_with


class Recorder:
    def __init__(self) -> None:
        self.sent: list[c.Input] = []
        self.statuses: list[Any] = []
        self.dead: list[tuple[str, str]] = []

    def send(self, inp: c.Input) -> None:
        self.sent.append(inp)

    def status(self, record: Any, key: str) -> None:
        self.statuses.append(record)

    def dead_letter(self, msg: Any, reason: str, error_class: str) -> None:
        self.dead.append((reason, error_class))


class Store:
    def __init__(self) -> None:
        self.calls: list[tuple[str, list[str]]] = []

    def handed(self, gateway: str, worker: str, tasks: list[wire.Assignment]) -> None:
        self.calls.append((worker, [a.task_id for a in tasks]))

    def polled(self, task_type: str, domain: str, worker: str) -> None:
        self.calls.append((worker, [task_type]))

    def ended_of(self, gateway: str, task_ids: list[str]) -> set[str]:
        return set()

    def taken_by(self, gateway: str) -> list[HeldLease]:
        return [HeldLease("y", "wf", "t", 1, 2, "tok", gateway, "w1", None, None)]

    def logs(self, task_id: str) -> list[dict[str, Any]]:
        return []


@pytest.fixture
def settings() -> Settings:
    return settings_with(
        {"ES_SCHED_API_GATEWAY_CAPACITY": "8", "ES_SCHED_API_GATEWAY_DEMAND_S": "5"}
    )


def _gateway(settings: Settings) -> tuple[Gateway, Recorder]:
    gw = Gateway(settings, Store(), worker_id="gw")  # type: ignore[arg-type]
    rec = Recorder()
    gw.reporter = rec  # type: ignore[assignment]
    return gw, rec


def _assignment(task_id: str, task_type: str = "t") -> wire.Assignment:
    return wire.Assignment(
        "gw", "wf", task_id, task_type, 1, 1, "tok", "2999-01-01T00:00:00+00:00", {}
    )


def test_without_polls_the_gateway_announces_no_type_and_one_slot(settings: Settings) -> None:
    gw, rec = _gateway(settings)
    gw._heartbeat()
    [status] = rec.statuses
    assert (status.types, status.concurrency, status.running) == ([], 1, [])


def test_a_poll_announces_its_type_and_count_capped_by_capacity(settings: Settings) -> None:
    gw, rec = _gateway(settings)
    assert gw.take("t", 3, "w1") == []
    gw._heartbeat()
    assert (rec.statuses[-1].types, rec.statuses[-1].concurrency) == (["t"], 3)
    assert gw.take("t", 2, "w2") == []  # another HTTP worker's demand adds up
    gw._heartbeat()
    assert (rec.statuses[-1].types, rec.statuses[-1].concurrency) == (["t"], 5)
    assert gw.take("u", 20, "w3") == []
    gw._heartbeat()
    assert (rec.statuses[-1].types, rec.statuses[-1].concurrency) == (["t", "u"], 8)


def test_update_v2_taking_the_next_task_keeps_the_workers_batch_demand(
    settings: Settings,
) -> None:
    """conductor-python's threads share one worker id: each thread's update-v2 asks for the
    next task (count 1), which announced room for 1 where the batch poll asked for 6."""
    gw, rec = _gateway(settings)
    gw._stale.beat()
    assert gw.take("t", 6, "sdk") == []
    gw._waiting["x"] = _Held(_assignment("x"), 0.0)
    [a] = gw.take("t", 1, "sdk", next_of_update=True)  # takes one, keeps the demand
    assert a.task_id == "x"
    gw._heartbeat()
    assert rec.statuses[-1].concurrency == 1 + 6  # the one taken, room for 6 more
    assert gw.take("t", 2, "sdk") == []  # a poll says what the worker wants now
    gw._heartbeat()
    assert rec.statuses[-1].concurrency == 1 + 2


def test_a_task_whose_lease_ran_out_while_the_gateway_was_silent_is_given_back(
    settings: Settings,
) -> None:
    """A gateway starved past 3 heartbeats skips what may be stale; the dispatcher may still
    hold the lease (bench/api_workers.py: 9 tasks reported cancelled that way waited forever),
    so it is declined, which ends a live lease and re-queues the task, not cancelled."""
    gw, rec = _gateway(settings)
    gw._stale.beat()
    expired = replace(_assignment("x"), lease_expires_at="2000-01-01T00:00:00+00:00")
    gw._waiting["x"] = _Held(expired, 0.0)
    assert gw.take("t", 5, "w1") == []
    [back] = rec.sent
    assert isinstance(back, c.ReportDeclined) and "not heartbeating" in back.reason
    assert "x" not in gw._waiting


def test_a_held_task_goes_to_the_poll_and_is_reported_started(settings: Settings) -> None:
    gw, rec = _gateway(settings)
    gw._stale.beat()
    gw._waiting["x"] = _Held(_assignment("x"), 0.0)
    [a] = gw.take("t", 5, "w1")
    assert a.task_id == "x"
    assert gw.store.calls == [("w1", ["x"])]  # type: ignore[attr-defined]
    assert [type(i).__name__ for i in rec.sent] == ["ReportStarted"]
    assert rec.sent[0].worker_id == "gw"  # type: ignore[attr-defined]
    gw._heartbeat()
    assert rec.statuses[-1].running == ["x"]


def test_an_unpolled_task_is_handed_back_once_its_type_is_no_longer_polled(
    settings: Settings,
) -> None:
    gw, rec = _gateway(settings)
    assert gw.take("t", 1, "w1") == []
    polled_at = gw.demand.wanted["t", "w1"][0]
    gw._waiting["x"] = _Held(_assignment("x"), polled_at)
    gw._settle(polled_at + 1)  # still wanted: kept
    assert "x" in gw._waiting and rec.sent == []
    gw._settle(polled_at + 6)  # nobody polled "t" for longer than the demand window
    assert "x" not in gw._waiting
    [back] = rec.sent  # declined: the lease goes back unused, the attempt is not spent
    assert isinstance(back, c.ReportDeclined)
    assert (back.task_id, back.worker_id, back.lease_epoch) == ("x", "gw", 1)
    assert "no HTTP worker asked this API process" in back.reason
    gw._heartbeat()
    assert rec.statuses[-1].running == [] and rec.statuses[-1].types == []


def test_a_task_is_handed_back_once_polls_that_came_every_100ms_stop(settings: Settings) -> None:
    """ADR 34: behind two API processes an HTTP worker's polls may stop reaching this one for
    good; its patience follows the gaps it saw (the 1 s floor here), not the 5 s window."""
    gw, rec = _gateway(settings)
    for i in range(20):  # what take() records, at the clock the polls came at
        gw.demand.asked("t", "w1", 4, i * 0.1, next_of_update=False)
    last = 1.9
    gw._waiting["x"] = _Held(_assignment("x"), last)
    gw._idle_check(last + 0.6)
    assert "x" in gw._waiting and rec.sent == []
    gw._idle_check(last + 1.1)
    assert "x" not in gw._waiting
    [back] = rec.sent
    assert isinstance(back, c.ReportDeclined) and "for 1s" in back.reason
    assert gw.demand.types() == set() and gw._kick.is_set()  # a status says so at once


def test_updates_of_a_types_tasks_keep_it_from_idling(settings: Settings) -> None:
    """A worker updating what it took does not poll meanwhile: its updates count as asking."""
    gw, rec = _gateway(settings)
    for i in range(20):
        gw.demand.asked("t", "w1", 4, i * 0.1, next_of_update=False)
    gw._waiting["x"] = _Held(_assignment("x"), 1.9)
    gw.demand.busy("t", 2.5)  # what Gateway.heard records for an update at 2.5 s
    gw._idle_check(3.1)
    assert "x" in gw._waiting and rec.sent == []
    gw._idle_check(3.6)
    assert "x" not in gw._waiting


def test_a_long_poll_waiting_on_a_type_keeps_its_tasks(settings: Settings) -> None:
    gw, rec = _gateway(settings)
    woken: list[str] = []
    gw.take("t", 1, "w1")
    at = gw.demand.wanted["t", "w1"][0]
    gw.wake_on_arrival("t", lambda: woken.append("t"), on=True)
    gw.wake_on_arrival("u", lambda: woken.append("u"), on=True)
    gw._waiting["x"] = _Held(_assignment("x"), at)
    gw._idle_check(at + 60)
    assert "x" in gw._waiting and rec.sent == []
    gw._on_record(_Msg(wire.encode(_assignment("z"))))  # type: ignore[arg-type]
    assert woken == ["t"]  # only the waiters of the arrived task's type


def test_only_assignments_sealed_to_this_process_are_held(settings: Settings) -> None:
    """ADR 74: its status publishes its key; an assignment sealed to it is held with the token
    opened (the store and its reports need it), one sealed to another key is dead-lettered."""
    gw, rec = _gateway(settings)
    gw._heartbeat()
    assert rec.statuses[-1].lease_key == gw.lease_key.public
    mine = sealed.Sealer().seal("tok-z", gw.lease_key.public)
    gw._on_record(_Msg(wire.encode(replace(_assignment("z"), lease_token=mine))))  # type: ignore[arg-type]
    assert gw._waiting["z"].assignment.lease_token == "tok-z"
    old = sealed.Sealer().seal("tok-o", sealed.LeaseKey().public)  # a past process's
    gw._on_record(_Msg(wire.encode(replace(_assignment("o"), lease_token=old))))  # type: ignore[arg-type]
    assert "o" not in gw._waiting
    [(reason, error_class)] = rec.dead
    assert error_class == "SealError" and "assignment of o (epoch 1) to gw" in reason


class _Msg:
    def __init__(self, value: bytes) -> None:
        self._value = value

    def value(self) -> bytes:
        return self._value

    def offset(self) -> int:
        return 3


def test_a_restarted_gateway_lists_the_tasks_http_workers_still_hold(settings: Settings) -> None:
    gw, rec = _gateway(settings)
    gw._restore()
    gw._heartbeat()
    assert rec.statuses[-1].running == ["y"]  # its lease lives on; an update can still end it


def test_the_position_is_committed_up_to_the_first_assignment_no_poll_took(
    settings: Settings,
) -> None:
    gw, _rec = _gateway(settings)
    assert gw._commit_point(40) == 40
    gw._waiting["x"] = _Held(_assignment("x"), 0.0, offset=12)
    gw._waiting["z"] = _Held(_assignment("z"), 0.0, offset=17)
    assert gw._commit_point(40) == 12


def test_poll_data_is_written_at_most_once_a_second_per_worker_and_type(
    settings: Settings,
) -> None:
    gw, _rec = _gateway(settings)
    assert [gw.poll_due("t", "", "w1") for _ in range(5)] == [True, False, False, False, False]
    assert gw.poll_due("t", "", "w2") and gw.poll_due("u", "", "w1")
    gw._poll_written[("t", "", "w1")] -= 1.0  # its last write a second further back
    assert gw.poll_due("t", "", "w1")
