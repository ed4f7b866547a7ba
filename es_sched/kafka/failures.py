"""How es-sched reads a ``KafkaError``: one classification for every role.

Transactional producer API (``classify``), after librdkafka's "Transactional Producer / Error
handling" (INTRODUCTION.md) and the transactional API notes in ``rdkafka.h``:

- ``FENCED``: ``_FENCED``, ``PRODUCER_FENCED`` or ``INVALID_PRODUCER_EPOCH``. Another producer
  with our ``transactional.id`` called ``init_transactions`` after us; librdkafka itself turns an
  ``INVALID_PRODUCER_EPOCH`` produce response into a fatal ``_FENCED`` (rdkafka_request.c) and
  normalises both broker codes to ``_FENCED`` (``rd_kafka_txn_normalize_err``). Checked first:
  a fencing error is also fatal, but re-creating the producer would fence the newer owner back.
- ``ABORTABLE``: ``txn_requires_abort()``: abort, rewind the input, try again.
- ``RETRIABLE``: ``retriable()``: the same call may be made again (timeouts, transport errors);
  ``commit_transaction`` and ``init_transactions`` resume what runs in the background,
  ``send_offsets_to_transaction`` must be retried with identical offsets and group metadata.
- ``FATAL``: ``fatal()``, and (librdkafka's advice) any error with none of the flags: the
  producer instance is unusable and must be replaced.

Consumer group calls (``rejoins``): a synchronous offset commit of a member that fell out of its
group (``UNKNOWN_MEMBER_ID``, ``ILLEGAL_GENERATION``, ``REBALANCE_IN_PROGRESS``) or that cannot
reach the coordinator fails without harm: the consumer rejoins by itself (the rebalance
callbacks run inside a later poll) and the uncommitted records are delivered again.
A static member (ADR 21) fenced by another process with its ``group.instance.id``
(``instance_fenced``) is an operator error, as a fenced producer is: the role stops.
``retrying`` repeats a consumer call (``committed``) through a broker outage, checking a stop
flag between tries, so a role never dies of a broker restart; ``seek_to_committed`` uses it to
rewind a consumer to its group's committed offsets, ``assign_at_committed`` to start a new
assignment at them (every group consumer's ``on_assign``: librdkafka#5586, below).
"""

from __future__ import annotations

import enum
import logging
import threading
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException, Message, TopicPartition

from es_sched.errors import EsSchedError

log = logging.getLogger(__name__)
T = TypeVar("T")


class Kind(enum.Enum):
    RETRIABLE = "retriable"
    ABORTABLE = "abortable"
    FENCED = "fenced"
    FATAL = "fatal"


FENCING = frozenset(
    {
        KafkaError._FENCED,
        KafkaError.PRODUCER_FENCED,
        KafkaError.INVALID_PRODUCER_EPOCH,
    }
)


def classify(err: KafkaError) -> Kind:
    """What to do about an error of the transactional producer API."""
    if err.code() in FENCING:
        return Kind.FENCED
    if err.fatal():
        return Kind.FATAL
    if err.txn_requires_abort():  # checked before retriable, as rdkafka.h's example does
        return Kind.ABORTABLE
    if err.retriable():
        return Kind.RETRIABLE
    return Kind.FATAL


def error_of(exc: BaseException) -> KafkaError | None:
    """The ``KafkaError`` a ``KafkaException`` carries (confluent-kafka puts it in ``args[0]``)."""
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return exc.args[0]
    return None


# The member must rejoin (its generation is gone) or the coordinator is unreachable for now.
REJOIN = frozenset(
    {
        KafkaError.UNKNOWN_MEMBER_ID,
        KafkaError.ILLEGAL_GENERATION,
        KafkaError.REBALANCE_IN_PROGRESS,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.NOT_COORDINATOR,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError._WAIT_COORD,
        KafkaError._TRANSPORT,
        KafkaError._TIMED_OUT,
        KafkaError._ALL_BROKERS_DOWN,
        KafkaError._ASSIGNMENT_LOST,
        KafkaError._NO_OFFSET,
        KafkaError.UNSTABLE_OFFSET_COMMIT,
    }
)


# The client lost its brokers: what a broker's kill, restart or network cut looks like.
BROKER_AWAY = frozenset({KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN})


def rejoins(err: KafkaError) -> bool:
    """True if a failed consumer-group call (commit, committed) may simply be tried later."""
    return not err.fatal() and (err.code() in REJOIN or err.retriable())


def instance_fenced(err: KafkaError) -> bool:
    """True if a consumer error says another consumer joined the group with our
    ``group.instance.id`` (FENCED_INSTANCE_ID).

    librdkafka turns the broker's FENCED_INSTANCE_ID into a consumer fatal error, which
    confluent-kafka hands back as an error event of code ``_FATAL`` whose ``fatal()`` is False
    and whose original code survives only in the text ("Static consumer fenced by other
    consumer with same group.instance.id", librdkafka 2.16); ``rd_kafka_fatal_error`` is not
    exposed for consumers. Hence the text check next to the code check.
    """
    if err.code() == KafkaError.FENCED_INSTANCE_ID:
        return True
    return err.code() == KafkaError._FATAL and "group.instance.id" in (err.str() or "")


def consumer_fatal(err: KafkaError) -> bool:
    """A consumer error after which the consumer is unusable (it must not be polled on)."""
    return err.fatal() or err.code() == KafkaError._FATAL


class Stopped(EsSchedError):
    """The stop flag was set while waiting for Kafka; the role is shutting down."""


def retrying(
    call: Callable[[], T],
    what: str,
    stop: threading.Event,
    backoff_s: float = 0.5,
    max_backoff_s: float = 5.0,
) -> T:
    """``call()`` until it stops raising a ``rejoins`` error; ``Stopped`` if ``stop`` is set.

    Any other Kafka error is raised as it is, for the caller to translate.
    """
    delay = backoff_s
    while True:
        try:
            return call()
        except KafkaException as exc:
            err = error_of(exc)
            if err is None or not rejoins(err):
                raise
            log.warning("%s failed (%s): trying again in %.1fs", what, err, delay)
        if stop.wait(delay):
            raise Stopped(f"stopped while waiting for Kafka ({what})")
        delay = min(max_backoff_s, delay * 2)


def wait(stop: threading.Event, seconds: float) -> None:
    """A backoff between tries that ends early, with ``Stopped``, when the role is stopped."""
    if stop.wait(seconds):
        raise Stopped("stopped while waiting for Kafka")


class GroupConsumer(Protocol):
    """The part of ``confluent_kafka.Consumer`` the loop and the rewinds use."""

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Message]: ...
    def assignment(self) -> list[TopicPartition]: ...
    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]: ...
    def committed(
        self, partitions: list[TopicPartition], timeout: float = -1
    ) -> list[TopicPartition]: ...
    def seek(self, partition: TopicPartition) -> None: ...
    def consumer_group_metadata(self) -> Any: ...


class Committing(Protocol):
    def committed(
        self, partitions: list[TopicPartition], timeout: float = -1
    ) -> list[TopicPartition]: ...


def committed_offsets(
    consumer: Committing, partitions: list[TopicPartition], stop: threading.Event
) -> list[TopicPartition]:
    """The group's committed offset of each of ``partitions``, or ``OFFSET_BEGINNING`` where
    nothing is committed (as ``auto.offset.reset=earliest``, which every group consumer here
    uses); waits out a broker outage, a moving coordinator and a pending transactional commit
    (``UNSTABLE_OFFSET_COMMIT``)."""

    def committed() -> list[TopicPartition]:
        tps = consumer.committed(partitions, timeout=10)
        for tp in tps:
            if tp.error is not None:
                raise KafkaException(tp.error)
        return tps

    return [
        TopicPartition(tp.topic, tp.partition, tp.offset if tp.offset >= 0 else OFFSET_BEGINNING)
        for tp in retrying(committed, "reading the committed offsets", stop)
    ]


class Assigning(Committing, Protocol):
    """The part of ``confluent_kafka.Consumer`` an ``on_assign`` callback uses."""

    def assign(self, partitions: list[TopicPartition]) -> None: ...


def assign_at_committed(
    consumer: Assigning, partitions: list[TopicPartition], stop: threading.Event
) -> list[TopicPartition]:
    """Assign ``partitions`` (from ``on_assign``) at offsets read here, never at "the stored
    offset"; returns what was assigned.

    Why: assigned without an offset, librdkafka fetches the committed offsets itself, and if
    that OffsetFetch meets a stale coordinator whose answer is a request-level
    ``NOT_COORDINATOR`` with no partitions, the partitions stay "being queried" for good: no
    retry, no fetch, no error after the one "Failed to fetch committed offsets for 0
    partition(s)" (librdkafka#5586, reported against 2.16). The broker SIGSTOP fault test met
    it (``tests/integration/test_broker_restart.py``, ADR 40): the dispatcher logged that line
    once and dispatched nothing after it. ``committed()`` surfaces the same error to us
    instead, and ``retrying`` asks again.
    """
    at = committed_offsets(consumer, partitions, stop)
    consumer.assign(at)
    return at


def seek_to_committed(consumer: GroupConsumer, stop: threading.Event) -> None:
    """Point every assigned partition back at the group's committed offset (its beginning when
    nothing is committed, as ``auto.offset.reset=earliest``); waits out a broker outage."""
    assigned = consumer.assignment()
    if not assigned:
        return
    for tp in committed_offsets(consumer, assigned, stop):
        offset = tp.offset
        try:
            consumer.seek(TopicPartition(tp.topic, tp.partition, offset))
        except KafkaException as exc:
            # Revoked meanwhile, or not fetching yet: either way its next fetch starts at the
            # committed offset.
            log.warning("seek %s[%d] to %d: %s", tp.topic, tp.partition, offset, exc)
