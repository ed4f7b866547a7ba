"""kafka/static_membership.py: a static member fenced off its instance id stops for a twin and
rejoins after a self-fence (right after Kafka errors: a broker restart, confluent-kafka-go
#494)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import orjson
import pytest
from confluent_kafka import KafkaError, Message

from es_sched.kafka.static_membership import (
    MAX_REJOINS,
    UNANSWERED_S,
    Fenced,
    StaticMember,
    rejoining,
    unanswered,
)
from testkit.fake_txn import (
    FakeClients,
    FakeConsumer,
    FakeProducer,
    abortable,
    batch,
    retriable,
    run_loop,
)


def member() -> StaticMember:
    """A member whose consumer was just made (``config``): not away."""
    made = StaticMember("g", "p-decider-0", enabled=True)
    made.config()
    return made


FENCED_TEXT = (
    "Fatal error: Broker: Static consumer fenced by other consumer with same group.instance.id"
)


def sessions(fences: int, after_trouble: bool) -> tuple[list[int], Callable[[], None]]:
    ran: list[int] = []

    def session() -> None:
        ran.append(len(ran))
        if len(ran) <= fences:
            raise Fenced("transactional.id 'p-decider-0' was fenced", after_trouble)

    return ran, session


def test_a_fence_right_after_kafka_errors_drops_every_partition_and_rejoins() -> None:
    dropped: list[bool] = []
    ran, session = sessions(fences=1, after_trouble=True)
    rejoining(threading.Event(), member(), session, lambda: dropped.append(True))
    assert (len(ran), dropped) == (2, [True])


def test_a_fence_out_of_a_quiet_sky_is_a_twin_and_stops_the_role() -> None:
    dropped: list[bool] = []
    _, session = sessions(fences=1, after_trouble=False)
    with pytest.raises(Fenced, match="was fenced"):
        rejoining(threading.Event(), member(), session, lambda: dropped.append(True))
    assert dropped == []


def test_a_fence_that_keeps_coming_back_stops_the_role() -> None:
    ran, session = sessions(fences=MAX_REJOINS + 1, after_trouble=True)
    with pytest.raises(Fenced):
        rejoining(threading.Event(), member(), session, lambda: None)
    assert len(ran) == MAX_REJOINS + 1


def test_a_fence_while_stopping_just_ends_the_role() -> None:
    stop = threading.Event()
    stop.set()
    ran, session = sessions(fences=1, after_trouble=True)
    rejoining(stop, member(), session, lambda: None)
    assert len(ran) == 1


def test_the_loop_marks_a_fence_after_consumer_errors_as_after_trouble() -> None:
    fenced = Message(error=KafkaError(KafkaError._FATAL, FENCED_TEXT))
    with pytest.raises(Fenced) as quiet:
        run_loop(FakeClients(), consumer=FakeConsumer([[fenced]]))
    assert not quiet.value.after_trouble
    down = Message(error=KafkaError(KafkaError._TRANSPORT))
    with pytest.raises(Fenced) as troubled:
        run_loop(FakeClients(), consumer=FakeConsumer([[down, fenced]]))
    assert troubled.value.after_trouble


def test_a_fence_after_a_retried_transaction_call_is_after_trouble() -> None:
    """The three-node test's decider died of a self-fence when the group coordinator's node
    was killed: its consumer reported no error (librdkafka logs connection failures, it does
    not return them from ``consume``), only ``commit_transaction`` timed out twice and was
    retried (resumed) successfully; then the fence came. A retried call is Kafka trouble."""
    fenced = Message(error=KafkaError(KafkaError._FATAL, FENCED_TEXT))
    slow = FakeProducer({"commit_transaction": [retriable(), retriable()]})
    with pytest.raises(Fenced) as troubled:
        run_loop(FakeClients(slow), batch([]), consumer=FakeConsumer([[], [fenced]]))
    assert troubled.value.after_trouble
    assert slow.names().count("commit_transaction") == 3  # committed, not aborted


def test_a_twins_fence_seen_first_by_the_transaction_is_not_trouble() -> None:
    """CI, stop 22: a twin decider joined; the first decider's ``send_offsets_to_transaction``
    failed with FENCED_INSTANCE_ID (the transaction was aborted), then its consumer reported the
    fence. The aborted transaction was the fence itself, not Kafka trouble before it: the
    decider must stop (a twin), not rejoin and fence the twin."""
    fenced = Message(error=KafkaError(KafkaError._FATAL, FENCED_TEXT))
    twin = FakeProducer({"send_offsets_to_transaction": [abortable(KafkaError.FENCED_INSTANCE_ID)]})
    with pytest.raises(Fenced) as quiet:
        run_loop(FakeClients(twin), batch([]), consumer=FakeConsumer([[], [fenced]]))
    assert not quiet.value.after_trouble
    assert "abort_transaction" in twin.names()  # the fence did reach the transaction first
    other = FakeProducer({"send_offsets_to_transaction": [abortable()]})  # any other abort is
    with pytest.raises(Fenced) as troubled:
        run_loop(FakeClients(other), batch([]), consumer=FakeConsumer([[], [fenced]]))
    assert troubled.value.after_trouble


def test_a_fence_after_the_consumer_logged_a_broker_connection_failure_rejoins() -> None:
    """The three-node test's decider, its group coordinator's node killed: no consumer error,
    no retried or failed transaction, only librdkafka's "GroupCoordinator: Connect to ...
    failed" log line of its consumer, then the fence 8 s later. That line is trouble; other
    lines (the fence's own FATAL line among them) are not."""
    member = StaticMember("g", "p-decider-0", enabled=True)
    logger = member.config()["logger"]
    logger.log(logging.CRITICAL, "%s [%s] %s", "FATAL", "c#consumer-1", "Fatal error: fenced")
    logger.log(logging.INFO, "%s [%s] %s", "REBALANCE", "c#consumer-1", "rejoining")
    _, quiet = sessions(fences=1, after_trouble=False)
    with pytest.raises(Fenced):
        rejoining(threading.Event(), member, quiet, lambda: None)
    failed = "GroupCoordinator: 127.0.0.1:19132: Connect to ipv4#127.0.0.1:19132 failed"
    logger.log(logging.ERROR, "%s [%s] %s", "FAIL", "c#consumer-1", failed)
    dropped: list[bool] = []
    ran, troubled = sessions(fences=1, after_trouble=False)
    rejoining(threading.Event(), member, troubled, lambda: dropped.append(True))
    assert (len(ran), dropped) == (2, [True])


def report(**brokers: tuple[int, int]) -> str:
    """A librdkafka statistics report naming, per broker, (waitresp_cnt, rxidle in us)."""
    return orjson.dumps(
        {
            "brokers": {
                name: {"waitresp_cnt": w, "rxidle": rx, "state": "UP"}
                for name, (w, rx) in brokers.items()
            }
        }
    ).decode()


def test_a_broker_that_stopped_answering_a_request_in_flight_is_trouble() -> None:
    """The SIGSTOP test's idle decider: no connection failed and no call timed out in 30 s, only
    its requests went unanswered; then the fence on SIGCONT. Idle connections (nothing in
    flight) and brokers answering within ``UNANSWERED_S`` are not trouble."""
    member = StaticMember("g", "p-decider-0", enabled=True)
    stats = member.config()["stats_cb"]
    for quiet in (
        report(b1=(0, 60_000_000)),
        report(b1=(3, int(UNANSWERED_S * 1e6) - 1)),
        "not json",
        report(),
    ):
        stats(quiet)
        assert not member.troubled(), quiet
    _, fenced = sessions(fences=1, after_trouble=False)
    with pytest.raises(Fenced):
        rejoining(threading.Event(), member, fenced, lambda: None)
    stats(report(b1=(0, 10), GroupCoordinator=(1, int(UNANSWERED_S * 1e6) + 1)))
    assert member.troubled()
    ran, troubled = sessions(fences=1, after_trouble=False)
    rejoining(threading.Event(), member, troubled, lambda: None)
    assert len(ran) == 2
    assert unanswered(report(a=(1, 9_000_000), b=(1, 10)), UNANSWERED_S) == ["a"]


def test_the_consumer_settings_name_the_instance_and_a_client_id_of_this_process() -> None:
    on = StaticMember("g", "p-timers-0", enabled=True).config()
    assert on["group.instance.id"] == "p-timers-0"
    assert on["client.id"].startswith("p-timers-0/")
    assert on["logger"] is not None  # librdkafka's lines, to Python logging, noting trouble
    assert on["statistics.interval.ms"] > 0 and on["stats_cb"] is not None  # unanswered brokers
    assert StaticMember("g", "p-timers-0", enabled=False).config() == {}


@pytest.mark.parametrize("broker_away", [True, False], ids=["broker-away", "quiet"])
def test_a_producer_fence_rejoins_only_after_the_consumer_saw_the_broker_away(
    broker_away: bool,
) -> None:
    """CI, stop 57: the broker paused for 30 s (the transaction timeout); on SIGCONT the
    coordinator aborted a transaction of the decider's epoch, the commit under way met the
    bumped epoch and the whole ``es-sched run`` stopped as if a twin ran. Its consumer had seen
    the broker away: that fence rejoins. A retried call alone is not enough for a producer's
    fence (a rebalance's aborted transaction is no outage): out of a quiet sky it stops."""
    member = StaticMember("g", "p-decider-0", enabled=True)
    if broker_away:
        failed = "127.0.0.1:19120/bootstrap: Connect to ipv4#127.0.0.1:19120 failed"
        member.config()["logger"].log(logging.ERROR, "%s [%s] %s", "FAIL", "c#c-1", failed)
    fence = KafkaError(KafkaError._FENCED, "Producer fenced by newer instance", fatal=True)
    producers = [FakeProducer({"commit_transaction": [retriable(), fence]}), FakeProducer()]
    clients = FakeClients(*producers)
    ran: list[int] = []

    def session() -> None:
        ran.append(len(ran))
        run_loop(clients, batch([]), consumer=FakeConsumer([[]]))

    if broker_away:
        rejoining(threading.Event(), member, session, lambda: None)
        assert len(ran) == 2 and producers[1].names()[0] == "init_transactions"
    else:
        with pytest.raises(Fenced, match="was fenced") as caught:
            rejoining(threading.Event(), member, session, lambda: None)
        assert not caught.value.after_trouble and len(ran) == 1


def test_a_fence_after_this_process_was_away_rejoins() -> None:
    """The zombie decider of ``test_role_faults`` and ``bench/recovery.py``: SIGSTOPped inside a
    transaction past its session; the decider that took its partitions ended that transaction
    (ADR 79), and on SIGCONT the commit meets the fence before the consumer serves a statistics
    report. No statistics for ``UNANSWERED_S`` is an absence: trouble now, and once served,
    trouble for the window. A member serving them each second is not away."""
    away = member()
    away.served_at -= UNANSWERED_S + 1  # the statistics last served before the pause
    assert away.troubled()
    ran, fenced = sessions(fences=1, after_trouble=False)
    rejoining(threading.Event(), away, fenced, lambda: None)
    assert len(ran) == 2
    away.stats(report())  # served at last: the gap is noted as trouble
    assert away.troubled() and away.trouble_at == away.served_at
    present = member()
    present.config()["stats_cb"](report())
    assert not present.troubled()
    assert not StaticMember("g", "p-decider-0", enabled=False).troubled()
