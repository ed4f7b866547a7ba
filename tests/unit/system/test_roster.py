"""The roster's rules (``es_sched.roster``, ADR 61 and 63): health, who may take an instance id,
foreign deployments, the deployment check of assignments; the record's round trip; and the
System views (``/api/v1/system``, ``/ui/system``) over a fake board."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient

from es_sched import roster
from es_sched.api.app import create_app
from es_sched.api.services import Lazy, Services
from es_sched.errors import SchemaError
from es_sched.roster import (
    Presence,
    Roster,
    claim,
    foreign,
    forgotten,
    health,
    orphaned,
    same_deployment,
)
from es_sched.serialization.records import decode_liveness, encode_liveness
from es_sched.settings import ApiSettings, SystemSettings, load_settings

T0 = datetime(2026, 12, 7, 6, 0, tzinfo=UTC)
STALE_S = 15.0


def held(**kw: Any) -> Presence:
    base = Presence("dep-a", "decider", "0", "h1", 100, "0.1.0", T0, T0)
    return replace(base, **kw)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_health_is_alive_until_the_stale_window_then_stale_and_stopped_when_said() -> None:
    assert health(held(), at(STALE_S), STALE_S) == "alive"
    assert health(held(), at(STALE_S + 0.1), STALE_S) == "stale"
    assert health(held(state="stopped"), at(1), STALE_S) == "stopped"


def test_a_free_stopped_or_own_instance_is_taken() -> None:
    assert claim(None, "h1", 5, T0, STALE_S, False).take
    assert claim(held(state="stopped"), "h1", 5, T0, STALE_S, True).take
    assert claim(held(), "h1", 100, T0, STALE_S, True).take


def test_a_live_holder_on_this_host_refuses_naming_its_host_and_pid() -> None:
    verdict = claim(held(), "h1", 5, at(1), STALE_S, holder_running=True)
    assert not verdict.take
    assert "pid 100 on host h1" in verdict.reason
    assert "--replace" in verdict.reason


def test_a_crashed_holder_on_this_host_is_taken_over_at_once() -> None:
    # Its record is fresh (it died a moment ago); its pid no longer runs.
    verdict = claim(held(), "h1", 5, at(0.5), STALE_S, holder_running=False)
    assert verdict.take
    assert "no longer running" in verdict.reason


def test_another_hosts_holder_is_taken_only_once_its_record_is_stale() -> None:
    refused = claim(held(), "h2", 5, at(STALE_S - 1), STALE_S, holder_running=False)
    assert not refused.take
    assert "pid 100 on host h1" in refused.reason
    taken = claim(held(), "h2", 5, at(STALE_S + 1), STALE_S, holder_running=False)
    assert taken.take
    assert "silent for 16s" in taken.reason


def test_replace_takes_a_live_instance_on_purpose() -> None:
    verdict = claim(held(), "h1", 5, at(1), STALE_S, True, replace_holder=True)
    assert verdict.take
    assert "on purpose" in verdict.reason


def test_a_process_stops_only_when_one_started_later_holds_its_key() -> None:
    mine = held()
    assert not roster.taken_over(mine, None)
    assert not roster.taken_over(mine, held(seen_at=at(5)))  # its own renewal
    assert roster.taken_over(mine, held(pid=200, started_at=at(1)))  # --replace
    assert not roster.taken_over(mine, held(pid=200, started_at=at(-1)))  # an older one: it stops
    assert not roster.taken_over(mine, held(pid=200, started_at=at(1), state="stopped"))


def test_foreign_lists_only_live_processes_of_another_deployment() -> None:
    records = [
        held(),
        held(deployment="dep-b", instance="1"),
        held(deployment="dep-b", instance="2", seen_at=at(-60)),  # stale
        held(deployment="dep-b", instance="3", state="stopped"),
    ]
    assert [p.instance for p in foreign(records, "dep-a", at(1), STALE_S)] == ["1"]


def test_a_dead_process_keyed_record_of_this_host_is_forgotten_a_claimed_one_is_not() -> None:
    records = [
        held(),  # the decider: its instance is claimed, a restart replaces its record
        held(role="projector-pg", instance="0@h1-100"),
        held(role="projector-pg", instance="0@h1-101", pid=101),
        held(role="api", instance="h2-100", host="h2"),  # another host: not ours to judge
    ]
    gone = forgotten(records, "h1", lambda pid: pid == 101)
    assert [p.key for p in gone] == ["projector-pg/0@h1-100"]
    assert held().claims and held(role="dispatcher").claims  # a static member (ADR 79)
    assert not held(role="projector-pg").claims


def test_the_orphans_are_running_processes_of_the_role_out_of_the_group_that_held_them() -> None:
    """ADR 79: whose open transaction a decider given commands[2] and [3] ends."""
    held_them = ("t.commands[2]", "t.task-results[2]")
    records = [
        held(instance="b", partitions=held_them),  # the orphan
        held(instance="c", partitions=("t.commands[3]",)),  # still a member: rebalanced away
        held(instance="d", partitions=held_them, state="stopped"),  # said it stopped
        held(instance="e", partitions=("t.commands[0]",)),  # held none of them
        held(instance="a", partitions=held_them),  # this process's own instance
        held(role="timers", instance="f", partitions=held_them),  # another role
    ]
    taken = ["t.commands[2]", "t.commands[3]"]
    found = orphaned(records, "decider", "a", taken, members={"a", "c"})
    assert [p.instance for p in found] == ["b"]
    assert orphaned(records, "decider", "a", [], members=()) == []


def test_same_deployment_accepts_ours_and_an_unstamped_record_only() -> None:
    assert same_deployment("dep-a", "dep-a")
    assert same_deployment("", "dep-a")  # written before the stamp
    assert not same_deployment("dep-b", "dep-a")


def test_a_record_round_trips_and_a_bad_one_says_why() -> None:
    p = held(partitions=("t.commands[0]", "t.commands[1]"), lag=7)
    assert decode_liveness(encode_liveness(p)) == p
    assert decode_liveness(encode_liveness(p.stopped(at(3)))).state == "stopped"
    with pytest.raises(SchemaError, match="pid"):
        decode_liveness(encode_liveness(p).replace(b'"pid":100', b'"pid":"100"'))
    with pytest.raises(SchemaError, match="state"):
        decode_liveness(encode_liveness(p).replace(b'"running"', b'"maybe"'))


def test_the_roster_keeps_the_newest_record_per_key_and_a_tombstone_removes_it() -> None:
    r = Roster()
    r.apply("decider/0", held())
    r.apply("decider/0", held(pid=200))
    assert r.get("decider/0") == held(pid=200)
    r.apply("decider/0", None)
    assert r.get("decider/0") is None


def test_the_deployment_id_is_the_setting_or_derived_from_the_install_directory() -> None:
    assert SystemSettings(deployment="prod-eu").deployment_id == "prod-eu"
    derived = SystemSettings().deployment_id
    assert derived.startswith("install-") and len(derived) == len("install-") + 10
    assert SystemSettings().deployment_id == derived  # stable
    assert SystemSettings(liveness_interval_s=2, stale_after_intervals=3).stale_after_s == 6


class Board:
    def __init__(self, records: list[Presence]) -> None:
        self._records = records

    def records(self) -> list[Presence]:
        return list(self._records)


def test_the_system_views_flag_a_stale_process_and_another_deployments() -> None:
    settings = replace(
        load_settings(),
        api=ApiSettings(auth="off"),
        system=SystemSettings(deployment="dep-a", liveness_interval_s=5),
    )
    now = datetime.now(UTC)
    board = Board(
        [
            held(seen_at=now, partitions=("p.commands[0]",), lag=3),
            held(role="timers", pid=101, seen_at=now - timedelta(seconds=60)),
            held(role="worker", instance="w9", deployment="dep-b", seen_at=now),
        ]
    )
    svc = Services(settings, Lazy(object), Lazy(object), Lazy(object))  # type: ignore[arg-type]
    svc.system_board.put(board)  # type: ignore[arg-type]
    client = TestClient(create_app(svc))
    answer = client.get("/api/v1/system").json()
    assert answer["deployment"] == "dep-a" and answer["staleAfterS"] == 15
    by_role = {p["role"]: p for p in answer["processes"]}
    assert by_role["decider"]["health"] == "alive"
    assert by_role["decider"]["lag"] == 3 and by_role["decider"]["partitions"] == ["p.commands[0]"]
    assert by_role["timers"]["health"] == "stale" and by_role["timers"]["silentS"] >= 60
    assert by_role["worker"]["foreign"] and not by_role["decider"]["foreign"]
    page = client.get("/ui/system")
    assert page.status_code == 200
    assert 'data-role="timers" data-instance="0" data-health="stale"' in page.text
    assert "1 role process stale" in page.text
    assert "another deployment" in page.text
    assert 'href="/ui/system"' in page.text
