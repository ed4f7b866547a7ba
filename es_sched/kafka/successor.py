"""A successor ends the open transaction of the process it took partitions from (ADR 79).

A decider given partitions reads their changelog and committed offsets as ``read_committed``
(KIP-447: ``require_stable``). If the process that held them was dropped from the group with a
transaction open (killed, paused by SIGSTOP or a stalled VM, cut off), both reads wait until
the transaction coordinator aborts it: ``transaction.timeout.ms`` plus the broker's cleanup
interval, 30-40 s with the defaults (issue 52's probe: 20.6 s without progress on any
partition). Initialising that process's transactional id ends it at once: the coordinator
aborts the open transaction and bumps the epoch, which fences the old producer, as a restart
under the same instance would.

Who it is: the roster (``es_sched.roster.orphaned``). A running process of the role whose last
liveness record listed a partition just given to this one, and which is no longer a member of
the group, had its work taken away without saying so; a member still in the group handed its
partitions over in the rebalance, and is never touched. Without static membership the group's
members carry no instance id, so nothing is ended (the successor waits, as before).

Its failure classes: the roster or the group description not readable in time, or an
``init_transactions`` that fails or times out: logged, and the successor goes on as it would
have without this (it waits for the coordinator's abort). Never raised: ending another's
transaction is a shortcut, not a condition of progress.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from es_sched import roster
from es_sched.errors import InfrastructureError
from es_sched.kafka.clients import KafkaClients
from es_sched.kafka.roster import RosterReader

log = logging.getLogger(__name__)
CALL_TIMEOUT_S = 10.0


class Successor:
    """Ends the orphaned transactions of ``role``'s processes (transactional id
    ``<txn_prefix><instance>``, which is also its ``group.instance.id`` in ``group``)."""

    def __init__(
        self,
        clients: KafkaClients,
        system_topic: str,
        group: str,
        txn_prefix: str,
        role: str,
        mine: str,
    ) -> None:
        self.clients, self.system_topic, self.group = clients, system_topic, group
        self.txn_prefix, self.role, self.mine = txn_prefix, role, mine
        self.reader: RosterReader | None = None
        self.ended: list[str] = []  # transactional ids ended, in order (for tests and logs)
        self._prepared: threading.Thread | None = None

    def prepare(self) -> None:
        """Read the roster up to its end on a thread, while the role joins its group: the read
        (a consumer made, the topic read) took 0.6 s of a restarted decider's path from its
        assignment to its first event when done there (``bench/recovery.py``)."""
        self._prepared = threading.Thread(target=self._catch_up, name="successor", daemon=True)
        self._prepared.start()

    def _catch_up(self) -> None:
        try:
            self._records()
        except (KafkaException, InfrastructureError) as exc:
            log.warning("%s: the roster not read yet (%s)", self.role, exc)

    def end(self, taken: Iterable[str]) -> list[str]:
        """End the open transactions of the processes that held ``taken`` ("topic[p]") and
        left the group; the transactional ids ended."""
        taken = list(taken)
        if self._prepared is not None:  # its reader is this thread's once it is done
            self._prepared.join(CALL_TIMEOUT_S)
            if self._prepared.is_alive():
                log.warning("%s: the roster still being read; nothing ended", self.role)
                return []
        try:
            records = self._records()
            if not roster.orphaned(records, self.role, self.mine, taken, ()):
                return []  # nobody else held them: no group description needed
            members = self._members()
        except (KafkaException, InfrastructureError) as exc:
            log.warning("%s: the roster or group %s not read (%s)", self.role, self.group, exc)
            return []
        ended = []
        for p in roster.orphaned(records, self.role, self.mine, taken, members):
            txn_id = f"{self.txn_prefix}{p.instance}"
            started = time.monotonic()
            try:
                self.clients.producer(txn_id).init_transactions(CALL_TIMEOUT_S)
            except KafkaException as exc:
                log.warning("%s: could not end %s's open transaction: %s", self.role, txn_id, exc)
                continue
            log.warning(
                "%s: ended the open transaction of %s (%s, no longer in group %s, last "
                "heard of at %s) in %.2fs",
                self.role,
                txn_id,
                p.where,
                self.group,
                p.seen_at.isoformat(timespec="seconds"),
                time.monotonic() - started,
            )
            ended.append(txn_id)
        self.ended += ended
        return ended

    def _records(self) -> list[roster.Presence]:
        if self.reader is None:
            self.reader = RosterReader(self.clients.connection, self.system_topic)
        self.reader.catch_up(CALL_TIMEOUT_S)
        return self.reader.records()

    def _members(self) -> set[str]:
        """The instances of the group's static members now."""
        admin = AdminClient(self.clients.connection.config())
        [future] = admin.describe_consumer_groups(
            [self.group], request_timeout=CALL_TIMEOUT_S
        ).values()
        group = future.result(timeout=CALL_TIMEOUT_S)
        ids = (str(m.group_instance_id or "") for m in group.members)
        return {i.removeprefix(self.txn_prefix) for i in ids if i.startswith(self.txn_prefix)}

    def close(self) -> None:
        if self.reader is not None:
            self.reader.close()
