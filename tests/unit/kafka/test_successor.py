"""A successor ends the open transaction of the decider it took partitions from (ADR 79,
``es_sched.kafka.successor``): whom it initialises, and that nothing it meets stops it. The
broker's side is ``tests/integration/test_role_faults.py``'s zombie decider."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from es_sched.errors import InfrastructureError
from es_sched.kafka.successor import Successor
from es_sched.roster import Presence

T0 = datetime(2026, 12, 7, 6, 0, tzinfo=UTC)
BASE = Presence("dep", "decider", "a", "h1", 100, "0.1.0", T0, T0)


class Producers:
    """``KafkaClients.producer`` for transactional ids: records each ``init_transactions``."""

    def __init__(self, fail: str = "") -> None:
        self.inited: list[str] = []
        self.fail = fail

    def producer(self, txn_id: str | None = None, **_: Any) -> Any:
        outer = self

        class Made:
            def init_transactions(self, _timeout: float) -> None:
                if txn_id == outer.fail:
                    raise KafkaException(KafkaError(KafkaError._TIMED_OUT))
                outer.inited.append(str(txn_id))

        return Made()


def successor(
    producers: Producers, records: list[Presence], members: set[str] | Exception
) -> Successor:
    made = Successor(producers, "p.system", "p-decider", "p-decider-", "decider", "a")  # type: ignore[arg-type]

    def read_members() -> set[str]:
        if isinstance(members, Exception):
            raise members
        return members

    made._records = lambda: records  # type: ignore[method-assign]
    made._members = read_members  # type: ignore[method-assign]
    return made


def test_it_initialises_the_orphans_transactional_ids_only() -> None:
    records = [
        replace(BASE, instance="b", partitions=("p.commands[2]",)),  # out of the group
        replace(BASE, instance="c", partitions=("p.commands[3]",)),  # still a member
    ]
    producers = Producers()
    found = successor(producers, records, {"a", "c"})
    assert found.end(["p.commands[2]", "p.commands[3]"]) == ["p-decider-b"]
    assert producers.inited == ["p-decider-b"] and found.ended == ["p-decider-b"]


def test_nobody_else_held_them_so_the_group_is_not_even_described() -> None:
    producers = Producers()
    found = successor(producers, [BASE], RuntimeError("must not be asked"))
    assert found.end(["p.commands[0]"]) == []


@pytest.mark.parametrize(
    "trouble",
    [
        KafkaException(KafkaError(KafkaError._TIMED_OUT)),
        InfrastructureError("cannot read topic p.system"),
    ],
    ids=["kafka-error", "infrastructure-error"],
)
def test_what_it_cannot_read_or_end_is_logged_and_the_successor_goes_on(
    trouble: Exception, caplog: pytest.LogCaptureFixture
) -> None:
    records = [
        replace(BASE, instance="b", partitions=("p.commands[2]",)),
        replace(BASE, instance="z", partitions=("p.commands[2]",)),
    ]
    assert successor(Producers(), records, trouble).end(["p.commands[2]"]) == []
    producers = Producers(fail="p-decider-b")
    assert successor(producers, records, set()).end(["p.commands[2]"]) == ["p-decider-z"]
    assert "could not end p-decider-b's open transaction" in caplog.text


def test_the_roster_read_ahead_on_a_thread_is_waited_for_then_used() -> None:
    """``prepare`` reads the roster while the decider joins its group (off its restart's path
    from assignment to first event); ``end`` waits for that read, then uses the reader."""
    records = [replace(BASE, instance="b", partitions=("p.commands[1]",))]
    found = successor(Producers(), records, set())
    found.prepare()
    assert found.end(["p.commands[1]"]) == ["p-decider-b"]
