"""The exactly-once loop's failure paths, with a scripted producer and consumer.

One set of tests for the decider, the timer service and the retry relay: each fake call pops
the next scripted outcome (success, a ``KafkaError``, or a hang), so every classification of
``es_sched.kafka.failures`` is driven through ``TransactionalLoop.run`` as a role would.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException, Message

from es_sched.errors import InfrastructureError
from es_sched.kafka.bounded_caller import BoundedCaller, Wedged
from es_sched.kafka.failures import Kind, Stopped, classify, rejoins, seek_to_committed
from es_sched.kafka.static_membership import Fenced
from es_sched.kafka.transactional import TransactionalLoop
from es_sched.kafka.txn_role import Batch, Out
from testkit.fake_txn import (
    HANG,
    FakeClients,
    FakeConsumer,
    FakeProducer,
    FakeRole,
    Late,
    Outcome,
    abortable,
    batch,
    fatal,
    retriable,
    run_loop,
)


# -- classification ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("err", "kind"),
    [
        (KafkaError(KafkaError._FENCED, fatal=True), Kind.FENCED),
        (KafkaError(KafkaError.PRODUCER_FENCED), Kind.FENCED),
        (KafkaError(KafkaError.INVALID_PRODUCER_EPOCH, txn_requires_abort=True), Kind.FENCED),
        (fatal(), Kind.FATAL),
        (abortable(), Kind.ABORTABLE),
        (
            KafkaError(KafkaError._TIMED_OUT, retriable=True, txn_requires_abort=True),
            Kind.ABORTABLE,
        ),
        (retriable(), Kind.RETRIABLE),
        (KafkaError(KafkaError._STATE), Kind.FATAL),  # no flag at all: treat as fatal
    ],
)
def test_classification_follows_librdkafka(err: KafkaError, kind: Kind) -> None:
    assert classify(err) is kind


@pytest.mark.parametrize(
    ("err", "later"),
    [
        (KafkaError(KafkaError.UNKNOWN_MEMBER_ID), True),
        (KafkaError(KafkaError.REBALANCE_IN_PROGRESS), True),
        (KafkaError(KafkaError.ILLEGAL_GENERATION), True),
        (KafkaError(KafkaError._TRANSPORT), True),
        (KafkaError(KafkaError.GROUP_AUTHORIZATION_FAILED), False),
        (KafkaError(KafkaError.UNKNOWN_MEMBER_ID, fatal=True), False),
    ],
)
def test_a_failed_group_commit_is_retried_later_unless_fatal_or_refused(
    err: KafkaError, later: bool
) -> None:
    assert rejoins(err) is later


# -- the happy path ---------------------------------------------------------------------------
def test_a_batch_is_produced_then_its_offsets_sent_with_the_group_metadata_then_committed() -> None:
    p, committed = FakeProducer(), list[str]()
    clients = FakeClients(p)
    role, _ = run_loop(clients, batch(committed))
    assert clients.configs == [("p-decider-0", {"transaction.timeout.ms": 30_000})]
    assert p.names() == [
        "init_transactions",
        "begin_transaction",
        "send_offsets_to_transaction",
        "commit_transaction",
    ]
    assert p.produced == [("events", "wf-1", b"e1", -1), ("timers", b"t-1", None, 2)]
    offsets = [("in", 0, 5), ("in", 1, 11)]
    assert p.calls[2][1] == (offsets, "group-metadata")
    assert committed == ["b1"] and role.rewinds == [] and role.ticks == 2


def test_a_prompt_loop_waits_for_the_first_record_only_then_takes_what_has_arrived() -> None:
    """The decider's (ADR 41): ``consume(100, wait)`` would hold a batch of three for the whole
    wait (librdkafka returns early only with 100): the loop asks for one record with the wait,
    then for the rest without one, and hands the three to one step."""
    a, b, c = (Message(topic="in", partition=0, offset=n, value=b"x") for n in (1, 2, 3))
    cons = FakeConsumer([[a, b, c]])
    role, _ = run_loop(FakeClients(), batch([]), consumer=cons, prompt=True)
    assert cons.calls[:2] == [(1, 0.05), (99, 0)]
    assert [m.offset() for m in role.seen[0]] == [1, 2, 3]


def test_an_idle_prompt_poll_does_not_ask_again_without_waiting() -> None:
    cons = FakeConsumer([])
    run_loop(FakeClients(), consumer=cons, prompt=True)
    assert cons.calls == [(1, 0.05)]


def test_a_windowed_loop_takes_a_batch_per_wait() -> None:
    """The timer service's and retry relay's: their inputs wait for due times anyway, and a
    transaction per record arriving cost more CPU than the decider's (ADR 41)."""
    cons = FakeConsumer([[Message(topic="in", partition=0, offset=1, value=b"x")]])
    run_loop(FakeClients(), batch([]), consumer=cons)
    assert cons.calls[0] == (100, 0.05) and all(t != 0 for _, t in cons.calls)


def test_without_explicit_offsets_the_consumer_positions_are_committed() -> None:
    p = FakeProducer()
    run_loop(FakeClients(p), Batch([Out("commands", "wf", b"x")], None))
    sent = next(args for name, args in p.calls if name == "send_offsets_to_transaction")
    assert sent == ([("in", 0, 7), ("in", 1, 8)], "group-metadata")


def test_a_full_local_queue_is_drained_and_the_record_produced() -> None:
    p, committed = FakeProducer(), list[str]()
    p.full = 2
    run_loop(FakeClients(p), batch(committed))
    assert p.names().count("poll") == 2
    assert len(p.produced) == 2 and committed == ["b1"]


# -- retriable --------------------------------------------------------------------------------
def test_retriable_send_offsets_is_retried_with_the_same_offsets_and_metadata() -> None:
    p = FakeProducer({"send_offsets_to_transaction": [retriable(), retriable()]})
    committed = list[str]()
    role, _ = run_loop(FakeClients(p), batch(committed))
    sends = [args for name, args in p.calls if name == "send_offsets_to_transaction"]
    assert len(sends) == 3 and len({repr(a) for a in sends}) == 1
    assert "abort_transaction" not in p.names()
    assert committed == ["b1"] and role.rewinds == []


def test_retriable_commit_is_resumed_not_aborted() -> None:
    p = FakeProducer({"commit_transaction": [retriable(KafkaError._TRANSPORT)]})
    committed = list[str]()
    role, _ = run_loop(FakeClients(p), batch(committed))
    assert p.names().count("commit_transaction") == 2
    assert committed == ["b1"] and role.rewinds == []


def test_retriable_past_the_transaction_timeout_aborts() -> None:
    p = FakeProducer({"commit_transaction": [retriable()] * 1000})
    committed = list[str]()
    role, _ = run_loop(FakeClients(p), batch(committed), txn_ms=1000, call_timeout_s=0.2)
    assert "abort_transaction" in p.names()
    assert committed == [] and role.rewinds == [False]


def test_an_abort_refused_during_a_timed_out_commit_re_creates_the_producer_at_once() -> None:
    """The cluster test's decider, after the nodes came back: commit_transaction timed out past
    the transaction timeout, and abort_transaction then answered ``_CONFLICT`` ("Conflicting
    commit_transaction API call is already in progress", flagged retriable) 145 times in 30 s
    before the producer was re-created anyway. That abort cannot succeed while our own commit
    runs in the background: give the producer up at the first refusal."""
    conflict = KafkaError(KafkaError._CONFLICT, "commit in progress", retriable=True)
    p = FakeProducer(
        {"commit_transaction": [retriable()] * 1000, "abort_transaction": [conflict] * 1000}
    )
    clients, committed = FakeClients(p), list[str]()
    role, _ = run_loop(
        clients, batch(committed, "b1"), batch(committed, "b2"), txn_ms=1000, call_timeout_s=0.2
    )
    assert p.names().count("abort_transaction") == 1
    assert len(clients.made) == 2 and role.rewinds == [True]  # it may have committed
    assert committed == ["b2"]


# -- abortable --------------------------------------------------------------------------------
def test_abortable_aborts_and_the_role_rewinds_with_the_same_producer() -> None:
    p = FakeProducer({"send_offsets_to_transaction": [abortable()]})
    clients, committed = FakeClients(p), list[str]()
    role, _ = run_loop(clients, batch(committed, "b1"), batch(committed, "b2"))
    assert p.names().count("abort_transaction") == 1
    assert role.rewinds == [False]  # the batch is known not to be committed
    assert committed == ["b2"] and len(clients.made) == 1


def test_a_failed_abort_re_creates_the_producer() -> None:
    p = FakeProducer({"commit_transaction": [abortable()], "abort_transaction": [fatal()]})
    clients, committed = FakeClients(p), list[str]()
    role, _ = run_loop(clients, batch(committed, "b1"), batch(committed, "b2"))
    assert len(clients.made) == 2 and clients.made[1].names()[0] == "init_transactions"
    assert role.rewinds == [True] and committed == ["b2"]


# -- fenced -----------------------------------------------------------------------------------
@pytest.mark.parametrize("where", ["send_offsets_to_transaction", "commit_transaction"])
def test_fenced_stops_the_role_with_a_message_naming_the_transactional_id(where: str) -> None:
    p = FakeProducer({where: [KafkaError(KafkaError._FENCED, "Producer fenced", fatal=True)]})
    clients, committed = FakeClients(p), list[str]()
    stop = threading.Event()
    role = FakeRole(stop, batch(committed))
    loop = TransactionalLoop(clients, "p-decider-0", "decider", 30_000)
    with pytest.raises(InfrastructureError, match=r"'p-decider-0' was fenced") as caught:
        loop.run(stop, FakeConsumer(), role, 100, 0.0)
    assert "ES_SCHED_RUN_INSTANCE" in str(caught.value)
    assert isinstance(caught.value, Fenced) and not caught.value.after_trouble  # a twin
    assert committed == [] and role.rewinds == [] and len(clients.made) == 1
    assert p.closed.wait(5), "the fenced producer is closed on its own thread"


def fenced() -> KafkaError:
    return KafkaError(KafkaError._FENCED, "Producer fenced by newer instance", fatal=True)


@pytest.mark.parametrize(
    "script",
    [
        # CI, stop 24: the zombie decider, SIGSTOPped ~40 s inside send_offsets_to_transaction
        # (30 s transaction timeout), got _FENCED back on SIGCONT and stopped as if a twin ran.
        {"send_offsets_to_transaction": [Late(1.1, fenced())]},
        # Past the timeout the commit fails abortable and the abort meets the bumped epoch.
        {"commit_transaction": [Late(1.1, abortable())], "abort_transaction": [fenced()]},
    ],
    ids=["send_offsets", "abort"],
)
def test_fenced_past_the_transaction_timeout_is_the_coordinators_abort_and_re_creates_the_producer(
    script: dict[str, list[Outcome]], caplog: pytest.LogCaptureFixture
) -> None:
    old = FakeProducer(dict(script))
    clients, committed, stop = FakeClients(old), list[str](), threading.Event()
    role = FakeRole(stop, batch(committed, "b1"), batch(committed, "b2"))
    loop = TransactionalLoop(clients, "p-decider-0", "decider", 1000, 10.0, 5.0)
    loop.run(stop, FakeConsumer(), role, 100, 0.0)  # raises InfrastructureError if it stops
    assert len(clients.made) == 2 and clients.made[1].names()[0] == "init_transactions"
    assert role.rewinds == [True] and committed == ["b2"]
    assert "past the transaction timeout: the coordinator's abort" in caplog.text


# -- fatal and wedged -------------------------------------------------------------------------
def test_fatal_re_creates_the_producer_and_the_role_rebuilds() -> None:
    old = FakeProducer({"commit_transaction": [fatal()]})
    clients, committed = FakeClients(old), list[str]()
    role, _ = run_loop(clients, batch(committed, "b1"), batch(committed, "b2"))
    new = clients.made[1]
    assert new.names() == [
        "init_transactions",
        "begin_transaction",
        "send_offsets_to_transaction",
        "commit_transaction",
    ]
    assert "abort_transaction" not in old.names()
    assert role.rewinds == [True]  # it may have committed: the role must rebuild
    assert committed == ["b2"]
    assert old.closed.wait(5)


def test_a_call_that_never_returns_is_given_up_and_the_producer_replaced() -> None:
    stuck = FakeProducer({"send_offsets_to_transaction": [HANG]})
    clients, committed = FakeClients(stuck), list[str]()
    try:
        role, _ = run_loop(
            clients, batch(committed, "b1"), batch(committed, "b2"), call_timeout_s=0.2
        )
        assert len(clients.made) == 2
        assert role.rewinds == [True] and committed == ["b2"]
        assert not stuck.closed.is_set(), "its thread is still stuck in the call"
    finally:
        stuck.release.set()
    assert stuck.closed.wait(5), "closed once the call finally returned"


# -- opening the producer ---------------------------------------------------------------------
def test_init_transactions_is_retried_while_the_broker_is_unreachable() -> None:
    p = FakeProducer({"init_transactions": [retriable(), retriable(KafkaError._TRANSPORT)]})
    committed = list[str]()
    run_loop(FakeClients(p), batch(committed))
    assert p.names()[:3] == ["init_transactions"] * 3 and committed == ["b1"]


def test_a_fatal_init_at_start_is_a_configuration_error() -> None:
    err = KafkaError(KafkaError.INVALID_TRANSACTION_TIMEOUT, "too long", fatal=True)
    with pytest.raises(InfrastructureError, match="too long"):
        run_loop(FakeClients(FakeProducer({"init_transactions": [err]})))


def test_a_fatal_init_while_recovering_is_retried_with_a_new_producer() -> None:
    first = FakeProducer({"commit_transaction": [fatal()]})
    flaky = FakeProducer({"init_transactions": [fatal()]})
    clients, committed = FakeClients(first, flaky), list[str]()
    role, _ = run_loop(clients, batch(committed, "b1"), batch(committed, "b2"))
    assert len(clients.made) == 3 and role.rewinds == [True] and committed == ["b2"]


# -- stopping ---------------------------------------------------------------------------------
def test_stop_while_retrying_ends_the_loop_without_abort_or_rewind() -> None:
    stop = threading.Event()
    p = FakeProducer({"send_offsets_to_transaction": [retriable()] * 1000})
    real = p._do

    def stop_on_retry(name: str, *args: Any) -> None:
        if name == "send_offsets_to_transaction" and p.names().count(name) == 2:
            stop.set()  # SIGTERM while the broker is down
        real(name, *args)

    p._do = stop_on_retry  # type: ignore[method-assign]
    committed = list[str]()
    role = FakeRole(stop, batch(committed))
    TransactionalLoop(FakeClients(p), "p-decider-0", "decider", 30_000).run(
        stop, FakeConsumer(), role, 100, 0.0
    )
    assert "abort_transaction" not in p.names() and role.rewinds == [] and committed == []
    assert p.closed.wait(5)


# -- consuming --------------------------------------------------------------------------------
def test_consumer_errors_are_not_records_and_only_a_fatal_one_stops_the_role() -> None:
    ok = Message(topic="in", partition=0, offset=3, value=b"x")
    eof = Message(error=KafkaError(KafkaError._PARTITION_EOF))
    down = Message(error=KafkaError(KafkaError._TRANSPORT))
    role, _ = run_loop(FakeClients(), consumer=FakeConsumer([[ok, eof, down]]))
    assert [[m.offset() for m in seen] for seen in role.seen] == [[3]]
    broken = Message(error=KafkaError(KafkaError._FATAL, "gone", fatal=True))
    with pytest.raises(InfrastructureError, match="gone"):
        run_loop(FakeClients(), consumer=FakeConsumer([[broken]]))


def test_a_producer_that_lived_through_a_broker_outage_is_replaced_before_the_next_batch() -> None:
    """A broker's kill -9 and restart: the old producer's first ``send_offsets_to_transaction``
    never returned (librdkafka #5456), 15 s without a decision. A consumer that lost its
    brokers since the producer was made gets a new producer before the next transaction, with
    nothing to rewind (no transaction was open); any other consumer error does not."""
    ok = Message(topic="in", partition=0, offset=3, value=b"x")
    for error, producers in ((KafkaError._ALL_BROKERS_DOWN, 2), (KafkaError._MSG_TIMED_OUT, 1)):
        committed: list[str] = []
        clients = FakeClients()
        after = Message(error=KafkaError(error))
        role, _ = run_loop(
            clients, batch(committed), consumer=FakeConsumer([[after], [ok]]), prompt=True
        )
        assert len(clients.made) == producers, error
        assert clients.made[-1].names()[:2] == ["init_transactions", "begin_transaction"]
        assert committed == ["b1"] and role.rewinds == []
    # What a broker kill shows most often: no error from consume, only the consumer's logged
    # connection failures (``StaticMember.trouble_at``), after the producer was made.
    committed, clients, stop = [], FakeClients(), threading.Event()
    seen: list[float] = []
    loop = TransactionalLoop(
        clients, "p-decider-0", "decider", 30_000, brokers_away_at=lambda: seen[-1]
    )
    logged = FakeRole(stop, batch(committed))
    seen.append(time.monotonic() + 3600)  # a connection failure logged after the init
    loop.run(stop, FakeConsumer(), logged, 100, 0.0)
    assert len(clients.made) == 2 and committed == ["b1"] and logged.rewinds == []


def test_a_static_member_fenced_by_its_instance_id_stops_the_role_naming_the_instance() -> None:
    """What librdkafka 2.16 hands a consumer whose ``group.instance.id`` another consumer took
    (seen on the broker): code ``_FATAL`` with ``fatal()`` False, the cause only in the text.
    Before ADR 21 the loop logged it as a passing error and polled a dead consumer on."""
    text = (
        "Fatal error: Broker: Static consumer fenced by other consumer with same "
        "group.instance.id: Fatal consumer error: Broker: Static consumer fenced by other "
        "consumer with same group.instance.id"
    )
    fenced = Message(error=KafkaError(KafkaError._FATAL, text))
    with pytest.raises(InfrastructureError, match="ES_SCHED_RUN_INSTANCE must be unique") as got:
        run_loop(FakeClients(), consumer=FakeConsumer([[fenced]]))
    assert "group.instance.id" in str(got.value) and "was fenced" in str(got.value)
    other = Message(error=KafkaError(KafkaError._FATAL, "Fatal consumer error: something else"))
    with pytest.raises(InfrastructureError, match="something else"):
        run_loop(FakeClients(), consumer=FakeConsumer([[other]]))


def test_rewinding_waits_out_the_broker_and_seeks_to_the_committed_offsets() -> None:
    cons = FakeConsumer()
    cons.committed_errors = [KafkaError(KafkaError._TRANSPORT), KafkaError(KafkaError._TIMED_OUT)]
    seek_to_committed(cons, threading.Event())
    assert cons.seeks == [("in", 0, 40), ("in", 1, OFFSET_BEGINNING)]


def test_rewinding_gives_up_when_the_role_stops() -> None:
    cons, stop = FakeConsumer(), threading.Event()
    cons.committed_errors = [KafkaError(KafkaError._TRANSPORT)]
    stop.set()
    with pytest.raises(Stopped):
        seek_to_committed(cons, stop)
    assert cons.seeks == []


def test_bounded_caller_reraises_and_gives_up_on_a_hang() -> None:
    caller, release = BoundedCaller("test"), threading.Event()

    def boom(_t: float) -> None:
        raise KafkaException(retriable())

    with pytest.raises(KafkaException):
        caller.call(boom, 1.0, 1.0)
    with pytest.raises(Wedged):
        caller.call(lambda t: release.wait(t * 100), 0.05, 0.05)
    release.set()
