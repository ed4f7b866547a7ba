"""The exactly-once loop's failure paths on a real broker, through the decider.

Faults are injected through the role's Kafka clients (``testkit.faulty_role``); the
unit tests (tests/unit/kafka/test_transactional_loop.py) cover each classification with fakes. Every
test ends with the log's invariants: each submitted workflow completed, each workflow's seq is
1..n without gaps or duplicates, no event id twice.
"""

from __future__ import annotations

import threading

import pytest
from confluent_kafka import Consumer, Message
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from es_sched.kafka.clients import consumer, read_partition
from es_sched.kafka.failures import seek_to_committed
from es_sched.kafka.transactional import TransactionalLoop
from es_sched.kafka.txn_role import Batch, Out
from testkit.faulty_role import MODULE, Faults, FaultyClients, faulty
from testkit.runtime import (
    MEDIA,
    Env,
    Role,
    Worker,
    assert_log_invariants,
    final_status,
    read_events,
    roles,
)
from testkit.settings import BOOTSTRAP, kafka_connection, unique_name
from testkit.wait import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.fault]


def media_env() -> Env:
    env = Env()
    env.create()
    env.push_files(*MEDIA)
    return env


def start(env: Env, n: int) -> set[str]:
    inputs = [
        {"source_uri": f"file:///in/{i}.mp4", "asset_id": f"a{i}", "callback_url": "http://cb"}
        for i in range(n)
    ]
    return {s.workflow_id for s in env.submit("media_pipeline", inputs)}


INJECTED = 'send_offsets_to_transaction: KafkaError{code=INVALID_TXN_STATE,val=48,str="injected"}'


def escalated(log: str) -> bool:
    """The abort of the injected abortable error failed, and the producer was given up."""
    return "abort failed too" in log and f"{INJECTED}; re-creating the transactional" in log


def warnings(log: str) -> str:
    """The role log's warnings and errors: what a failed assertion on it should show."""
    return "\n".join(line for line in log.splitlines() if " WARNING " in line or " ERROR " in line)


def completed(env: Env, ids: set[str]) -> bool:
    by_wf = read_events(env)
    return all(final_status(by_wf.get(wf, [])) == "COMPLETED" for wf in ids)


def test_a_second_process_with_the_same_instance_fences_the_first_which_stops() -> None:
    env = media_env()
    same = {"ES_SCHED_RUN_INSTANCE": "same"}
    with Worker(env), roles(env, "decider", **same) as (first,):
        first.wait_log("restored partition 3", 60)
        # A twin that bypasses the roster's claim (``es-sched run`` refuses it, ADR 61;
        # tests/integration/test_system_roster.py): the fence is the last line of defence.
        second = Role(env, "decider-twin", ["--role", "decider"], module=MODULE, **same)
        try:
            second.wait_log("started", 60)
            # The second's init_transactions bumped the epoch of "<prefix>-decider-same", and
            # (static membership, ADR 21) its joining under the same group.instance.id fenced
            # the first's consumer: whichever the first notices first, it stops.
            second.wait_log("restored partition", 60)
            ids = start(env, 40)
            first.proc.wait(60)
            assert first.proc.returncode != 0
            log = first.log.read_text()
            assert f"transactional.id '{env.prefix}-decider-same' was fenced" in log
            assert "ES_SCHED_RUN_INSTANCE must be unique" in log
            # The fenced process committed nothing more; the second finishes everything.
            wait_until(lambda: completed(env, ids), 120, "the second decider to finish")
        finally:
            second.stop()
    assert_log_invariants(env, ids)


def decide_under(n: int, last_fault: str, *faults: str) -> tuple[Env, set[str], str]:
    """``n`` media workflows through a faulty decider (and a worker) until all complete, after
    ``last_fault`` is logged; the env, the workflow ids and the decider's log. The decider must
    end cleanly when stopped."""
    env = media_env()
    with Worker(env):
        victim = faulty(env, "decider", *faults)
        try:
            victim.wait_log("started", 60)
            ids = start(env, n)
            victim.wait_log(f"fault: {last_fault}", 120)
            wait_until(lambda: completed(env, ids), 180, f"{n} workflows despite the faults")
            log = victim.log.read_text()
        finally:
            victim.stop()
    assert victim.proc.returncode == 0, log[-3000:]
    return env, ids, log


def test_an_aborted_and_an_ambiguous_transaction_are_recovered_without_duplicates() -> None:
    env, ids, log = decide_under(
        150,
        "commit_transaction call 8 raises fatal",
        # abortable, raised once the broker has the offsets (the coordinator holds an ongoing
        # transaction): abort, rewind to the committed offsets, decide the batch again
        "--fail",
        "send_offsets_to_transaction:3:abortable:after",
        # fatal after the commit went through: the outcome is unknown to the loop, which
        # re-creates the producer and rebuilds the decider's state from the changelog
        "--fail",
        "commit_transaction:8:fatal:after",
    )
    assert "fault: send_offsets_to_transaction call 3 raises abortable" in log
    # The broker may refuse the abort itself (CI, stop 31: no "transaction aborted", the log
    # not kept; librdkafka#4849, open: abort_transaction "can sometimes fail with
    # INVALID_TXN_STATE"). The loop then gives the producer up as for a fatal error (the next
    # test): either way the batch is decided again, once.
    aborted = f"transaction aborted: {INJECTED}" in log
    assert aborted or escalated(log), warnings(log)
    assert "re-creating the transactional producer" in log
    assert "rebuilding partitions" in log
    assert_log_invariants(env, ids)


def test_a_refused_abort_gives_the_producer_up_and_the_state_is_rebuilt() -> None:
    """The path a broker's refusal of ``abort_transaction`` takes (librdkafka#4849), forced:
    the abort after the abortable error fails as fatal. Proof the faults fired: both logged.
    The loop re-creates the producer (whose ``init_transactions`` ends the open transaction)
    and the decider rebuilds its state from the changelog, as after an unknown outcome."""
    env, ids, log = decide_under(
        60,
        "abort_transaction call 1 raises fatal",
        "--fail",
        "send_offsets_to_transaction:3:abortable:after",
        "--fail",
        "abort_transaction:1:fatal",
    )
    assert escalated(log), warnings(log)
    assert "transaction aborted" not in log
    assert "rebuilding partitions" in log
    assert_log_invariants(env, ids)


class Copier:
    """A role copying each input record to ``out``; stops the loop after its first commit."""

    def __init__(self, stop: threading.Event, cons: Consumer, out: str) -> None:
        self.stop, self.cons, self.out = stop, cons, out
        self.pending: list[Message] = []
        self.rewinds: list[bool] = []

    def step(self, records: list[Message]) -> Batch | None:
        self.pending += records
        if not self.pending:
            return None
        outs = [Out(self.out, m.key(), m.value()) for m in self.pending]
        return Batch(outs, None, self.stop.set)

    def rewind(self, producer_lost: bool) -> None:
        self.rewinds.append(producer_lost)
        self.pending = []
        seek_to_committed(self.cons, self.stop)

    def tick(self) -> None:
        return None


def test_a_transaction_outliving_its_timeout_is_aborted_by_the_coordinator_and_the_loop_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The zombie decider of test_role_faults in one process, without its race: the coordinator
    aborts a transaction older than ``transaction.timeout.ms`` (2 s here) by bumping the
    producer's epoch, so the call the process was paused in comes back ``_FENCED`` (CI, stop
    24: the zombie took that for a twin's fence and stopped). The pause (15 s) stays under the
    loop's limit for a call (grace 60 s), so the reply is the broker's, not a given-up call.
    Proof the fault fired: the pause logged inside the open transaction with its record
    flushed, and the ``_FENCED`` reply. Invariants: the record is copied once, the paused
    transaction's flushed copy is invisible to ``read_committed``, the group's offset is past
    the input."""
    name = unique_name()
    src, out = f"{name}.in", f"{name}.out"
    admin = AdminClient(kafka_connection(BOOTSTRAP).config())
    for f in admin.create_topics([NewTopic(t, 1, 1) for t in (src, out)]).values():
        f.result(30)
    p = FaultyClients(kafka_connection(BOOTSTRAP)).producer()
    p.produce(src, b"input", b"k")
    assert p.flush(30) == 0
    stop = threading.Event()
    cons = consumer(kafka_connection(BOOTSTRAP), f"{name}.g", **{"enable.auto.commit": False})
    cons.subscribe([src])
    role = Copier(stop, cons, out)
    clients = FaultyClients(kafka_connection(BOOTSTRAP), Faults(pause_after_txns=1, pause_s=15))
    loop = TransactionalLoop(clients, f"{name}-copier", "copier", 2000, 10.0, 60.0)
    caplog.set_level("INFO")
    try:
        loop.run(stop, cons, role, 10, 0.5)  # an InfrastructureError here: taken for a twin
        committed = cons.committed(cons.assignment(), 30)
    finally:
        cons.close()
    assert "fault: transaction open with records flushed" in caplog.text
    assert "_FENCED" in caplog.text and "the coordinator's abort" in caplog.text, caplog.text
    assert role.rewinds == [True]
    copies = read_partition(kafka_connection(BOOTSTRAP), out, 0)
    assert [(m.key(), m.value()) for m in copies] == [(b"k", b"input")]
    assert [tp.offset for tp in committed] == [1]
