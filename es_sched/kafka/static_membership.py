"""A transactional role's static group membership (KIP-345, ADR 21) and its fencing rule.

A static member is fenced (FENCED_INSTANCE_ID) when another consumer registers with its
``group.instance.id``. Two different things look alike:

- a twin: a second process started with the same ``ES_SCHED_RUN_INSTANCE``. An operator error;
  the role stops, as it does when its transactional producer is fenced.
- a self-fence: after the group coordinator restarts or moves (a broker kill -9 and restart,
  ``tests/integration/test_broker_restart.py``), the consumer rejoins under a new member id
  while a request under its old one is still on the way; the coordinator fences the old member
  id and librdkafka makes that a fatal consumer error although no other process exists
  (confluent-kafka-go #494, "Consumer with static membership is not able to rejoin after
  broker restart"). The role must rejoin by itself: a scheduler must survive a broker restart
  (issue 13).

The group's description cannot tell them apart: a static member that replaces another keeps
the replaced member's ``client.id`` and host in the coordinator's metadata (seen on Kafka 4 with
two consumers of distinct client ids). What tells them apart is what came before: a self-fence
follows a coordinator change, which the role has seen as consumer errors, a transaction call
retried or a failed transaction, or as its consumer's broker connection failures (librdkafka
logs them, ``consume`` returns none: with a node of three killed, that log line or a retried
``commit_transaction`` was all the decider saw), or as a broker that stopped answering: a
request in flight with nothing received for ``UNANSWERED_S`` (librdkafka's statistics each
second: ``waitresp_cnt``, ``rxidle``). That last one is all an idle decider sees of a broker
paused (SIGSTOP): no connection fails and no call of its times out, and it is fenced on SIGCONT
(``tests/integration/test_broker_faults.py``). The process itself having been away counts too
(no statistics served for ``UNANSWERED_S``: SIGSTOP, a stalled VM): its session ended
meanwhile, and the decider that took its partitions ends its open transaction (ADR 79), which
fences it. A twin arrives out of a quiet sky. So
``Fenced.after_trouble`` says whether the loop saw trouble within ``TROUBLE_WINDOW_S``,
``StaticMember.troubled`` whether its consumer did: without either the role stops, with one
``rejoining`` drops the role's partitions and runs the session again (a new consumer and a new
transactional producer, as a restarted process would), at most ``MAX_REJOINS`` times in a row.
A twin started within that window of an outage is the one that stops: the rejoining process
initialises the transactional id again (fencing the twin's producer) and its consumer fences the
twin's, which reaches the twin out of a quiet sky. Either way one process keeps the instance.

The transactional producer's fence follows the same rule. Its epoch is bumped by a twin's
``init_transactions``, and also by the transaction coordinator when it aborts a transaction that
outlived ``transaction.timeout.ms``: after a broker paused for as long as that timeout, the
coordinator aborted one as it woke while the role's transaction of the same epoch was under way,
and the role stopped as if a twin ran (CI, stop 57: the whole ``es-sched run`` exited, 398
workflows stalled). A producer fence rejoins when the consumer saw the broker away
(``troubled``); the loop's own trouble does not count for it, as a rebalance's aborted
transaction is no outage and a twin may follow one.
"""

from __future__ import annotations

import logging
import math
import os
import secrets
import threading
import time
from collections.abc import Callable
from typing import Any

import orjson

from es_sched.errors import InfrastructureError

log = logging.getLogger(__name__)
librdkafka = logging.getLogger("es_sched.kafka.librdkafka")  # static members' consumer logs
TROUBLE_WINDOW_S = 120.0  # a broker's restart and the rejoins after it fit well inside
MAX_REJOINS = 5  # in a row: a fence that keeps coming back is not a coordinator hiccup
STEADY_S = 60.0  # a session that ran this long ends a row of rejoins
# A broker that has answered nothing for this long with requests in flight is away: a consumer
# in a group hears from its brokers at every fetch.wait.max.ms and heartbeat, both shorter.
UNANSWERED_S = 5.0
STATS_EVERY_MS = 1000


class Fenced(InfrastructureError):
    """The role was fenced: its consumer off its ``group.instance.id``, or its transactional
    producer by a newer epoch; ``after_trouble``: Kafka errors came shortly before (a self-fence
    or the coordinator's abort is likely), else a twin is."""

    def __init__(self, message: str, after_trouble: bool = False) -> None:
        super().__init__(message)
        self.after_trouble = after_trouble


class StaticMember:
    """One role's membership settings: ``group.instance.id`` = its transactional id."""

    def __init__(self, group: str, instance_id: str, enabled: bool) -> None:
        self.group, self.instance_id, self.enabled = group, instance_id, enabled
        # Unique per process (librdkafka's log lines name it), the same for every consumer this
        # process re-creates.
        self.client_id = f"{instance_id}/{os.getpid()}/{secrets.token_hex(3)}"
        self.trouble_at = -math.inf  # the consumer's last broker connection failure
        self.served_at = time.monotonic()  # the consumer's last statistics served

    def config(self) -> dict[str, Any]:
        """Consumer settings: none when static membership is turned off. The consumer's log
        goes through ``log`` (confluent-kafka's ``logger``), which notes trouble."""
        if not self.enabled:
            return {}
        self.served_at = time.monotonic()  # a new consumer: its statistics start now
        return {
            "group.instance.id": self.instance_id,
            "client.id": self.client_id,
            "logger": self,
            "statistics.interval.ms": STATS_EVERY_MS,
            "stats_cb": self.stats,
        }

    def log(self, level: int, msg: str, *args: Any) -> None:
        """A librdkafka log line (``args``: facility, client name, text), passed on to Python
        logging. A ``FAIL`` line (a broker connection failed) is trouble: with its group
        coordinator's node killed, this consumer's "GroupCoordinator: Connect ... failed" was
        the only sign the decider had before a self-fence (the loop saw no error)."""
        if args and args[0] == "FAIL":
            self.trouble_at = time.monotonic()
        librdkafka.log(level, msg, *args)

    def stats(self, report: str) -> None:
        """librdkafka's statistics (served by ``consume`` each second): a broker that stopped
        answering is trouble, as a failed connection is; so is this process itself having been
        away (no statistics served for ``UNANSWERED_S``: SIGSTOP, a stalled VM, a callback
        that blocked), as its session may have ended meanwhile."""
        now = time.monotonic()
        if now - self.served_at > UNANSWERED_S or unanswered(report, UNANSWERED_S):
            self.trouble_at = now
        self.served_at = now

    def troubled(self) -> bool:
        """Trouble within ``TROUBLE_WINDOW_S``, or away now: a process paused inside a
        transaction meets the fence (a successor ended its transaction, ADR 79) before its
        consumer serves the statistics that would say it was away."""
        now = time.monotonic()
        away = self.enabled and now - self.served_at > UNANSWERED_S
        return away or now - self.trouble_at < TROUBLE_WINDOW_S


def unanswered(report: str, after_s: float) -> list[str]:
    """The brokers of a librdkafka statistics report (JSON) with a request in flight and nothing
    received for over ``after_s``."""
    try:
        brokers = orjson.loads(report).get("brokers", {})
    except (orjson.JSONDecodeError, AttributeError):
        return []
    return [
        name
        for name, b in brokers.items()
        if b.get("waitresp_cnt", 0) > 0 and b.get("rxidle", -1) > after_s * 1e6
    ]


def rejoining(
    stop: threading.Event,
    member: StaticMember,
    session: Callable[[], None],
    drop_all: Callable[[], None],
) -> None:
    """``session()`` (subscribe, run the loop, close), run again after a self-fence.

    A fence with no trouble before it raises (a twin); so do ``MAX_REJOINS`` fences in a row
    (each within ``STEADY_S`` of the last rejoin). ``drop_all`` forgets every partition's state
    first: the rejoined member restores what it is assigned, as after a rebalance.
    """
    rejoins = 0
    while True:
        began = time.monotonic()
        try:
            session()
            return
        except Fenced as fenced:
            if stop.is_set():
                return
            if not (fenced.after_trouble or member.troubled()):
                raise
            if time.monotonic() - began > STEADY_S:
                rejoins = 0
            rejoins += 1
            if rejoins > MAX_REJOINS:
                raise
            log.warning(
                "%s: fenced off %r right after Kafka errors or an absence (a self-fence after a "
                "coordinator change, confluent-kafka-go #494, the coordinator's abort of a "
                "timed-out transaction, or a successor's end of this one's, ADR 79); "
                "rejoining (%d): %s",
                member.client_id,
                member.instance_id,
                rejoins,
                fenced,
            )
            drop_all()
