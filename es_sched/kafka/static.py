"""A transactional role's static group membership (KIP-345, ADR 21) and its fencing rule.

A static member is fenced (FENCED_INSTANCE_ID) when another consumer registers with its
``group.instance.id``. Two different things look alike:

- a twin: a second process started with the same ``ES_SCHED_RUN_INSTANCE``. An operator error;
  the role stops, as it does when its transactional producer is fenced.
- a self-fence: after the group coordinator moves or restarts (a broker kill -9 and restart
  here, 2 runs of 2 with librdkafka 2.16), the consumer rejoins under a new member id while a
  request under its old one is still on the way; the coordinator then fences the old member id
  and librdkafka makes that a fatal consumer error although no other process exists. Reported
  for librdkafka since 1.4 (confluent-kafka-go #494, "Consumer with static membership is not
  able to rejoin after broker restart", open). The role must rejoin by itself: a scheduler that
  stops for good on a broker restart is what issue 13 set out to end.

The group says which one it is: ``describe_consumer_groups`` lists each member's
``group.instance.id`` with its ``client.id``, and every member is given a ``client.id`` unique to
its process. A member with our instance id and another client id is a twin. Nobody, or our own
client id, is a self-fence: ``rejoining`` then drops the role's partitions and runs the session
again (a new consumer and a new transactional producer, as a restarted process would). Should
the group not answer, the fence is taken as our own: a real twin has also called
``init_transactions`` with our transactional id, so our next transaction is fenced and stops the
role anyway (the producer is the backstop, the group only the quick answer).
"""

from __future__ import annotations

import logging
import os
import secrets
import threading
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from es_sched.errors import InfrastructureError
from es_sched.kafka.clients import QUIET

log = logging.getLogger(__name__)
DESCRIBE_TIMEOUT_S = 10.0
MAX_REJOINS = 5  # in a row: a fence that keeps coming back is not a coordinator hiccup
STEADY_S = 60.0  # a session that ran this long ends a row of rejoins


class InstanceFenced(InfrastructureError):
    """The role's consumer was fenced off its ``group.instance.id`` (a twin or a self-fence)."""


class StaticMember:
    """One role's membership: the consumer settings, and who else holds its instance id."""

    def __init__(self, bootstrap: str, group: str, instance_id: str, enabled: bool) -> None:
        self.bootstrap, self.group, self.instance_id = bootstrap, group, instance_id
        self.enabled = enabled
        # Unique per process, the same for every consumer this process re-creates.
        self.client_id = f"{instance_id}/{os.getpid()}/{secrets.token_hex(3)}"

    def config(self) -> dict[str, Any]:
        """Consumer settings: none when static membership is turned off."""
        if not self.enabled:
            return {}
        return {"group.instance.id": self.instance_id, "client.id": self.client_id}

    def twin(self) -> str | None:
        """``client.id@host`` of another process holding our instance id; None if there is
        none or the group cannot say."""
        admin = AdminClient({"bootstrap.servers": self.bootstrap, **QUIET})
        try:
            future = admin.describe_consumer_groups([self.group])[self.group]
            description = future.result(timeout=DESCRIBE_TIMEOUT_S)
        except (KafkaException, TimeoutError) as exc:
            log.warning("describing group %s to tell a twin from a self-fence: %s", self.group, exc)
            return None
        for m in description.members:
            if m.group_instance_id == self.instance_id and m.client_id != self.client_id:
                return f"{m.client_id}@{m.host}"
        return None


def rejoining(
    stop: threading.Event,
    member: StaticMember,
    session: Callable[[], None],
    drop_all: Callable[[], None],
) -> None:
    """``session()`` (subscribe, run the loop, close), run again after a self-fence.

    A twin raises ``InstanceFenced`` naming it; so do ``MAX_REJOINS`` fences in a row (each
    within ``STEADY_S`` of the last rejoin).
    ``drop_all`` forgets every partition's state first: the rejoined member restores what it is
    assigned, as after a rebalance.
    """
    rejoins = 0
    while True:
        began = time.monotonic()
        try:
            session()
            return
        except InstanceFenced as fenced:
            if stop.is_set():
                return
            if time.monotonic() - began > STEADY_S:
                rejoins = 0
            twin = member.twin()
            if twin is not None:
                raise InstanceFenced(f"{fenced} (held now by {twin})") from None
            rejoins += 1
            if rejoins > MAX_REJOINS:
                raise
            log.warning(
                "%s: consumer fenced off group.instance.id %r with no other holder in group %s "
                "(a self-fence after a coordinator change); rejoining (%d)",
                member.client_id, member.instance_id, member.group, rejoins,
            )  # fmt: skip
            drop_all()
