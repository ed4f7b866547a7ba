"""A role whose transactional producer fails on purpose: fault injection without test hooks in
production code.

``python -m testkit.faulty_role --role decider [faults]`` builds the role through the
composition root (``es_sched.bootstrap.role``) exactly as ``es-sched run`` does, but hands it
``FaultyClients``: their transactional producers misbehave as the arguments say. Settings come
from the ``ES_SCHED_*`` environment as usual; SIGTERM/SIGINT stop the role.

Faults (counted over every producer the role creates, each fires once):

- ``--pause-after-txns K``: the K-th ``send_offsets_to_transaction`` first flushes the
  transaction's records (they are in the log, uncommitted) and logs ``fault: transaction open
  with records flushed``, then sleeps ``--pause-s`` inside the open transaction (a test kills
  the process meanwhile).
- ``--pause-when PATH``: the same pause, at the first ``send_offsets_to_transaction`` after
  ``PATH`` exists (``bench/recovery.py`` stops the process there, at a moment of its choosing).
- ``--fail METHOD:N:KIND[:after]``: the N-th call of ``METHOD`` (a transactional call such as
  ``commit_transaction``) raises a ``KafkaError`` of KIND (retriable, abortable, fatal,
  fenced); with ``after`` it raises only after the real call succeeded, so the loop cannot
  know whether the transaction committed.
- ``--corrupt SUFFIX:N``: the N-th record produced to ``<prefix>.SUFFIX`` (e.g. ``ready:1``)
  carries undecodable bytes instead of its value, and ``fault: corrupted`` is logged: its
  consumer must dead-letter it.

``--roster`` publishes the process's liveness record as ``es-sched run`` does (ADR 61): a
decider that takes its partitions finds it by that record and ends its open transaction (ADR
79). Without it the process bypasses the roster, as a twin started around ``es-sched run``'s
claim would.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition

from es_sched import bootstrap
from es_sched.kafka import roster
from es_sched.kafka.clients import KafkaClients, producer_config
from es_sched.kafka.connection import ROLE_PRINCIPALS, connection
from es_sched.metrics import Registry, serve
from es_sched.settings import load_settings
from testkit.runtime import Env, Role

log = logging.getLogger("es_sched.faulty")
MODULE = "testkit.faulty_role"
ERRORS = {
    "retriable": lambda: KafkaError(KafkaError._TIMED_OUT, "injected", retriable=True),
    "abortable": lambda: KafkaError(
        KafkaError.INVALID_TXN_STATE, "injected", txn_requires_abort=True
    ),
    "fatal": lambda: KafkaError(KafkaError._INCONSISTENT, "injected", fatal=True),
    "fenced": lambda: KafkaError(KafkaError._FENCED, "injected", fatal=True),
}


@dataclass
class Fail:
    method: str
    nth: int
    kind: str
    after: bool = False

    @classmethod
    def parse(cls, text: str) -> Fail:
        method, nth, kind, *rest = text.split(":")
        if kind not in ERRORS or rest not in ([], ["after"]):
            raise argparse.ArgumentTypeError(f"bad --fail {text!r}")
        return cls(method, int(nth), kind, rest == ["after"])


@dataclass
class Faults:
    pause_after_txns: int = 0
    pause_s: float = 120.0
    pause_when: str = ""  # a path: pause once it exists
    fails: list[Fail] = field(default_factory=list)
    corrupt: dict[str, int] = field(default_factory=dict)  # topic suffix -> nth record
    calls: Counter[str] = field(default_factory=Counter, repr=False)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def count(self, method: str) -> int:
        with self.lock:
            self.calls[method] += 1
            return self.calls[method]

    def error(self, method: str, nth: int, after: bool) -> KafkaError | None:
        for f in self.fails:
            if (f.method, f.nth, f.after) == (method, nth, after):
                log.warning(
                    "fault: %s call %d raises %s%s",
                    method,
                    nth,
                    f.kind,
                    " after it succeeded" if after else "",
                )
                return ERRORS[f.kind]()
        return None


class FaultyProducer(Producer):
    def __init__(self, config: dict[str, Any], faults: Faults) -> None:
        super().__init__(config)
        self.faults = faults

    def _around(self, method: str, real: Any, *args: Any) -> None:
        nth = self.faults.count(method)
        err = self.faults.error(method, nth, after=False)
        if err is not None:
            raise KafkaException(err)
        real(*args)
        err = self.faults.error(method, nth, after=True)
        if err is not None:
            raise KafkaException(err)

    def produce(self, topic: str, value: Any = None, *args: Any, **kwargs: Any) -> None:
        suffix = topic.rpartition(".")[2]
        nth = self.faults.corrupt.get(suffix)
        if nth is not None and self.faults.count(f"produce:{suffix}") == nth:
            log.warning("fault: corrupted record %d to %s", nth, topic)
            value = b"\x00corrupted by faulty_role"
        super().produce(topic, value, *args, **kwargs)

    def send_offsets_to_transaction(
        self, positions: list[TopicPartition], group_metadata: Any, timeout: float = -1
    ) -> None:
        nth = self.faults.calls["send_offsets_to_transaction"] + 1
        when = self.faults.pause_when
        if nth == self.faults.pause_after_txns or (when and os.path.exists(when)):
            self.faults.pause_when = ""  # once
            self.flush(30)
            log.warning(
                "fault: transaction open with records flushed; pausing %.0fs", self.faults.pause_s
            )
            time.sleep(self.faults.pause_s)
        real = super().send_offsets_to_transaction
        self._around("send_offsets_to_transaction", real, positions, group_metadata, timeout)

    def commit_transaction(self, timeout: float = -1) -> None:
        self._around("commit_transaction", super().commit_transaction, timeout)

    def abort_transaction(self, timeout: float = -1) -> None:
        self._around("abort_transaction", super().abort_transaction, timeout)

    def init_transactions(self, timeout: float = -1) -> None:
        self._around("init_transactions", super().init_transactions, timeout)


@dataclass(frozen=True)
class FaultyClients(KafkaClients):
    faults: Faults = field(default_factory=Faults)

    def producer(self, transactional_id: str | None = None, **extra: Any) -> Producer:
        config = producer_config(self.connection, transactional_id, **extra)
        if transactional_id is None:
            return Producer(config)
        return FaultyProducer(config, self.faults)


def faulty(env: Env, role: str, *faults: str) -> Role:
    """Start ``role`` with ``faults`` (the arguments above) as a child process of the test."""
    return Role(env, role, ["--role", role, *faults], module=MODULE)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--role", required=True, choices=("decider", "timers", "retry"))
    parser.add_argument("--pause-after-txns", type=int, default=0)
    parser.add_argument("--pause-s", type=float, default=120.0)
    parser.add_argument("--pause-when", default="", metavar="PATH")
    parser.add_argument("--fail", type=Fail.parse, action="append", default=[])
    parser.add_argument("--corrupt", action="append", default=[], help="SUFFIX:N")
    parser.add_argument("--roster", action="store_true", help="publish its liveness record")
    args = parser.parse_args()
    logging.basicConfig(level="INFO", format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = load_settings()
    corrupt = {suffix: int(nth) for suffix, nth in (c.split(":") for c in args.corrupt)}
    faults = Faults(args.pause_after_txns, args.pause_s, args.pause_when, args.fail, corrupt)
    clients = FaultyClients(connection(settings.kafka, ROLE_PRINCIPALS[args.role]), faults)
    registry = Registry()
    serve(registry, settings.runtime.metrics_port)  # ES_SCHED_RUN_METRICS_PORT, as es-sched run
    role = bootstrap.role(args.role, settings, registry, clients=clients)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda _n, _f: stop.set())
    beacon = None
    if args.roster:
        own, keys = (
            bootstrap.as_principal(settings, args.role),
            [(args.role, settings.runtime.instance)],
        )
        reader = roster.claim(own, keys, replace=False)
        beacon = roster.Beacon(own, keys, registry, reader, lambda _why: stop.set()).start()
    log.info("role %s started with faults %s", args.role, faults)
    try:
        role.run(stop)
    finally:
        if beacon is not None:
            beacon.close()
    log.info("role %s stopped", args.role)


if __name__ == "__main__":
    main()
