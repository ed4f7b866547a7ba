"""kafka/static.py: a static member fenced off its instance id stops for a twin and rejoins
after a self-fence (a broker restart, confluent-kafka-go #494)."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from es_sched.kafka.static import MAX_REJOINS, InstanceFenced, StaticMember, rejoining


class Member(StaticMember):
    def __init__(self, holders: list[str | None]) -> None:
        super().__init__("127.0.0.1:1", "g", "p-decider-0", enabled=True)
        self.holders, self.asked = holders, 0

    def twin(self) -> str | None:
        self.asked += 1
        return self.holders.pop(0)


def sessions(fences: int) -> tuple[list[int], Callable[[], None]]:
    ran: list[int] = []

    def session() -> None:
        ran.append(len(ran))
        if len(ran) <= fences:
            raise InstanceFenced("decider stops: transactional.id 'p-decider-0' was fenced")

    return ran, session


def test_a_self_fence_drops_every_partition_and_runs_the_session_again() -> None:
    member, dropped = Member([None]), []
    ran, session = sessions(fences=1)
    rejoining(threading.Event(), member, session, lambda: dropped.append(True))
    assert (len(ran), dropped, member.asked) == (2, [True], 1)


def test_a_twin_holding_the_instance_id_stops_the_role_naming_it() -> None:
    member, dropped = Member(["p-decider-0/4242/abcdef@/10.0.0.2"]), []
    _, session = sessions(fences=1)
    with pytest.raises(InstanceFenced, match=r"was fenced .*held now by p-decider-0/4242"):
        rejoining(threading.Event(), member, session, lambda: dropped.append(True))
    assert dropped == []


def test_a_fence_that_keeps_coming_back_stops_the_role() -> None:
    member = Member([None] * (MAX_REJOINS + 1))
    ran, session = sessions(fences=MAX_REJOINS + 1)
    with pytest.raises(InstanceFenced):
        rejoining(threading.Event(), member, session, lambda: None)
    assert len(ran) == MAX_REJOINS + 1


def test_a_fence_while_stopping_just_ends_the_role() -> None:
    stop, member = threading.Event(), Member([])
    stop.set()
    _, session = sessions(fences=1)
    rejoining(stop, member, session, lambda: None)
    assert member.asked == 0


def test_the_consumer_settings_name_the_instance_and_a_client_id_of_this_process() -> None:
    on = StaticMember("b:1", "g", "p-timers-0", enabled=True).config()
    assert on["group.instance.id"] == "p-timers-0"
    assert on["client.id"].startswith("p-timers-0/")
    assert StaticMember("b:1", "g", "p-timers-0", enabled=False).config() == {}
