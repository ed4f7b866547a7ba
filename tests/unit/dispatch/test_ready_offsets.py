"""The dispatcher's ready offsets: the commit point, and commits that fail without harm."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from es_sched.dispatch.ready_offsets import ReadyOffsets
from es_sched.errors import InfrastructureError

TP0, TP1 = ("ready", 0), ("ready", 1)


class Commits:
    """A synchronous commit that fails as scripted, then succeeds."""

    def __init__(self, *errors: KafkaError) -> None:
        self.errors = list(errors)
        self.calls: list[list[tuple[str, int, int]]] = []

    def __call__(self, todo: list[TopicPartition]) -> list[TopicPartition]:
        self.calls.append([(tp.topic, tp.partition, tp.offset) for tp in todo])
        if self.errors:
            raise KafkaException(self.errors.pop(0))
        return todo


def offsets_with_a_waiting_task() -> ReadyOffsets:
    o = ReadyOffsets()
    for offset in range(5):
        o.read(TP0, offset)
        o.queued(TP0, f"task-{offset}", offset)
    o.read(TP1, 9)
    for offset in (0, 1, 3, 4):
        o.done(f"task-{offset}")
    return o


def test_the_commit_point_stops_at_the_first_task_still_waiting() -> None:
    o, commits = offsets_with_a_waiting_task(), Commits()
    o.commit(commits)
    assert commits.calls == [[("ready", 0, 2), ("ready", 1, 10)]]
    o.commit(commits)  # nothing moved: no second commit
    assert len(commits.calls) == 1
    o.done("task-2")
    o.commit(commits)
    assert commits.calls[-1] == [("ready", 0, 5)]


@pytest.mark.parametrize(
    "code",
    [
        KafkaError.UNKNOWN_MEMBER_ID,
        KafkaError.REBALANCE_IN_PROGRESS,
        KafkaError.ILLEGAL_GENERATION,
        KafkaError._TRANSPORT,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
    ],
)
def test_a_commit_refused_while_the_group_rejoins_is_tried_again_next_time(code: int) -> None:
    o, commits = offsets_with_a_waiting_task(), Commits(KafkaError(code))
    o.commit(commits)  # logged, not raised: the dispatcher carries on
    o.commit(commits)
    assert commits.calls == [[("ready", 0, 2), ("ready", 1, 10)]] * 2


def test_a_fatal_or_unexpected_commit_error_stops_the_role() -> None:
    for err in (
        KafkaError(KafkaError.UNKNOWN_MEMBER_ID, fatal=True),
        KafkaError(KafkaError.GROUP_AUTHORIZATION_FAILED),
    ):
        with pytest.raises(InfrastructureError, match="committing ready offsets"):
            offsets_with_a_waiting_task().commit(Commits(err))


def test_a_lost_partition_forgets_its_tasks_and_offsets() -> None:
    o, commits = offsets_with_a_waiting_task(), Commits()
    assert o.forget([TopicPartition(*TP0)]) == {"task-2"}
    o.commit(commits)
    assert commits.calls == [[("ready", 1, 10)]]
