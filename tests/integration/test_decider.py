"""The decider on a real broker: exactly-once under crashes and rebalances, dead letters,
idempotent starts (the suite's "N workflows complete" run is tests/e2e/test_run_and_workers.py).
The test itself plays the workers (``testkit.runtime.Worker``). The crash test injects its pause
through the role's Kafka clients (``testkit.faulty_role``), not through a hook in the
decider."""

from __future__ import annotations

import threading

import pytest
from confluent_kafka import Message

from es_sched.domain.events import Event
from es_sched.kafka.clients import producer
from es_sched.kafka.dead_letters import header_map
from testkit.faulty_role import faulty
from testkit.kafka import Reader
from testkit.runtime import (
    MEDIA,
    Env,
    Worker,
    completed,
    count_records,
    final_status,
    media_inputs,
    read_events,
    roles,
)
from testkit.scale import pick
from testkit.settings import BOOTSTRAP, kafka_connection
from testkit.wait import wait_until

pytestmark = pytest.mark.integration
# Workflows in flight across the kill -9 and across the rebalances (the test scale's).
KILLED = pick(ci=100, full=150)
REBALANCED = pick(ci=150, full=300)


def media_env(**extra: str) -> Env:
    env = Env(extra=extra)
    env.create()
    env.push_files(*MEDIA)
    return env


def assert_clean_history(by_wf: dict[str, list[Event]]) -> None:
    """Per workflow: seq 1..n without gaps, no duplicate event id, one start."""
    for wf, events in by_wf.items():
        assert [e.seq for e in events] == list(range(1, len(events) + 1)), wf
        assert len({e.event_id for e in events}) == len(events), wf
        assert sum(e.type == "workflow.started" for e in events) == 1, wf


def done(env: Env, n: int) -> bool:
    return completed(env) >= n


def _summary(events: list[Event]) -> list[tuple[str, str]]:
    return [
        (e.type, getattr(e.payload, "ref", ""))
        for e in events
        if e.type in ("task.scheduled", "workflow.completed")
    ]


@pytest.mark.fault
def test_kill_9_inside_an_open_transaction_loses_and_doubles_nothing() -> None:
    reference = media_env()
    with roles(reference, "decider"), Worker(reference):
        reference.submit("media_pipeline", media_inputs(KILLED))
        wait_until(lambda: done(reference, KILLED), 120, "reference run")
    expected = sorted(_summary(v) for v in read_events(reference).values())

    env = media_env()
    with Worker(env):
        # The 4th transaction flushes its records, then pauses with the transaction open.
        victim = faulty(env, "decider", "--pause-after-txns", "4", "--pause-s", "120")
        try:
            victim.wait_log("started", 60)
            env.submit("media_pipeline", media_inputs(KILLED))
            victim.wait_log("fault: transaction open with records flushed", 60)
            uncommitted = count_records(env, env.topics.events, "read_uncommitted")
            committed = count_records(env, env.topics.events, "read_committed")
            assert uncommitted > committed, "the kill must cut an open transaction"
            victim.kill()
        finally:
            victim.stop()
        with roles(env, "decider"):
            wait_until(lambda: done(env, KILLED), 180, "recovery after kill -9")
    by_wf = read_events(env)
    assert len(by_wf) == KILLED
    assert_clean_history(by_wf)
    assert sorted(_summary(v) for v in by_wf.values()) == expected


@pytest.mark.fault
def test_a_rebalance_under_load_loses_and_doubles_nothing() -> None:
    # Dynamic members, so that the SIGTERM below hands b's partitions to a at once: a static
    # member (ADR 21) keeps them through its restart (tests/integration/test_decider_failover.py).
    env = media_env(ES_SCHED_RUN_STATIC_MEMBERSHIP="false")
    with Worker(env), roles(env, "decider", ES_SCHED_RUN_INSTANCE="a"):
        with roles(env, "decider", ES_SCHED_RUN_INSTANCE="b") as (second,):
            env.submit("media_pipeline", media_inputs(REBALANCED))
            second.wait_log("restored partition", 60)
        # second stopped (SIGTERM): its partitions move to the first; then it comes back
        with roles(env, "decider", ES_SCHED_RUN_INSTANCE="b"):
            wait_until(
                lambda: done(env, REBALANCED), 240, f"{REBALANCED} workflows across rebalances"
            )
    by_wf = read_events(env)
    assert len(by_wf) == REBALANCED
    assert all(final_status(v) == "COMPLETED" for v in by_wf.values())
    assert_clean_history(by_wf)


def test_poison_records_go_to_dead_letters_with_their_origin() -> None:
    env = media_env()
    poison: list[tuple[bytes, str]] = [
        (b"\xff\x00 not json", "not UTF-8 JSON"),
        (
            b'{"type": "workflow.explode", "schema_version": 1, "input_id": "x", '
            b'"workflow_id": "w"}',
            "unknown",
        ),
        (b'{"type": "workflow.cancel", "schema_version": 1, "workflow_id": "w"}', "input_id"),
        (
            b'{"type": "workflow.cancel", "schema_version": 9, "input_id": "x", '
            b'"workflow_id": "w"}',
            "schema_version",
        ),
    ]
    p = producer(kafka_connection(BOOTSTRAP))
    for raw, _ in poison:
        p.produce(env.topics.commands, key=b"w", value=raw)
    p.flush(30)
    with roles(env, "decider"), Worker(env):
        env.submit("media_pipeline", media_inputs(5))
        wait_until(lambda: done(env, 5), 60, "healthy workflows despite poison")
    dead = Reader(env.topics.dead_letters)
    try:
        wait_until(
            lambda: len(dead.read()) >= len(poison),
            30,
            lambda: f"{len(poison)} dead letters ({len(dead.messages)} arrived)",
        )
        letters: list[Message] = dead.messages
    finally:
        dead.close()
    by_value = {m.value(): header_map(m) for m in letters}
    for raw, reason_part in poison:
        headers = by_value[raw]
        assert headers["origin.topic"] == env.topics.commands
        assert headers["origin.offset"].isdigit() and headers["origin.partition"].isdigit()
        assert reason_part in headers["error.reason"], headers


def test_the_same_command_id_five_times_concurrently_starts_one_workflow() -> None:
    env = media_env()
    command_id, workflow_ids = f"order-{env.prefix}", set[str]()

    def submit() -> None:  # each sender is its own user with its own client
        [sent] = env.submit("media_pipeline", media_inputs(1), command_ids=[command_id])
        workflow_ids.add(sent.workflow_id)

    with roles(env, "decider"), Worker(env):
        senders = [threading.Thread(target=submit) for _ in range(5)]
        for t in senders:
            t.start()
        for t in senders:
            t.join()
        [wf] = workflow_ids
        wait_until(lambda: done(env, 1), 60, "the one workflow")
        submit()  # and once more after it finished
        with env.client() as client:
            client.pause(wf, command_id="late-pause")
        wait_until(
            lambda: any(e.type == "command.rejected" for e in read_events(env).get(wf, [])),
            30,
            "rejection",
        )
    by_wf = read_events(env)
    assert list(by_wf) == [wf]
    assert_clean_history(by_wf)
