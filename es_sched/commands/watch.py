"""The one reader behind every ``--wait``: the events topic from given offsets until a fact.

``watch(bootstrap, topic, start, timeout_s, seen, at_end)`` reads with ``read_committed``, by
assignment (no consumer group, no committed offsets: a read-only observer), from ``start``
(partition -> offset, from ``end_offsets`` taken before the command was produced; None: the
beginning, correct but slow on a long history). Each record goes to ``seen``; each time a
partition is read to its end, its number goes to ``at_end``. Either returning True ends the
watch (True); the deadline ends it with False. Its two uses are here: ``final_statuses``
(``CommandClient.wait``: submit's final statuses) and ``outcome_of`` (``CommandClient.outcome``:
one control command's answer).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)

from es_sched.commands.prepare import Outcome, awaited_final, caused_by, terminal_status
from es_sched.domain.events import Event
from es_sched.errors import InfrastructureError
from es_sched.kafka import clients
from es_sched.kafka.connection import KafkaConnection
from es_sched.serialization import SchemaCatalog, decode_event

Seen = Callable[[Message], bool]
AtEnd = Callable[[int], bool]


def end_offsets(bootstrap: KafkaConnection, topic: str) -> dict[int, int]:
    """The end of every partition of ``topic`` now (its high watermarks)."""
    reader = clients.consumer(bootstrap, None)
    try:
        return {
            p: reader.get_watermark_offsets(TopicPartition(topic, p), 10.0)[1]
            for p in partitions(reader, topic)
        }
    finally:
        reader.close()


def watch(
    bootstrap: KafkaConnection,
    topic: str,
    start: Mapping[int, int] | None,
    timeout_s: float,
    seen: Seen,
    at_end: AtEnd | None = None,
) -> bool:
    reader = clients.consumer(bootstrap, None, **{"enable.partition.eof": at_end is not None})
    deadline = time.monotonic() + timeout_s
    try:
        if start is None:
            start = dict.fromkeys(partitions(reader, topic), OFFSET_BEGINNING)
        reader.assign([TopicPartition(topic, p, offset) for p, offset in start.items()])
        while (left := deadline - time.monotonic()) > 0:
            msg = reader.poll(min(left, 0.5))
            if msg is None:
                continue
            err = msg.error()
            if err is None:
                if seen(msg):
                    return True
            elif err.code() == KafkaError._PARTITION_EOF:
                if at_end is not None and at_end(msg.partition() or 0):
                    return True
            else:
                raise InfrastructureError(f"reading {topic}: {err}")
        return False
    except KafkaException as exc:
        raise InfrastructureError(f"reading {topic}: {exc}") from exc
    finally:
        reader.close()


def partitions(reader: Consumer, topic: str) -> list[int]:
    metadata = reader.list_topics(topic, timeout=10.0).topics.get(topic)
    if metadata is not None and metadata.error is not None:
        raise KafkaException(metadata.error)
    if metadata is None or not metadata.partitions:
        raise InfrastructureError(f"topic {topic} is missing")
    return sorted(metadata.partitions)


def final_statuses(
    bootstrap: KafkaConnection,
    topic: str,
    catalog: SchemaCatalog,
    workflow_ids: Iterable[str],
    timeout_s: float,
    start: Mapping[int, int] | None,
) -> dict[str, str | None]:
    """Final status per workflow (COMPLETED, FAILED, ..., REJECTED for a start refused), None
    if not final by the timeout."""
    result: dict[str, str | None] = dict.fromkeys(workflow_ids)
    pending = set(result)
    if not pending:
        return result

    def seen(msg: Message) -> bool:
        workflow_id = awaited_final(msg.value(), pending)
        if workflow_id is not None:
            status = terminal_status(decode_event(msg.value() or b"", catalog))
            if status is not None:
                result[workflow_id] = status
                pending.discard(workflow_id)
        return not pending

    watch(bootstrap, topic, start, timeout_s, seen)
    return result


def outcome_of(
    bootstrap: KafkaConnection,
    topic: str,
    catalog: SchemaCatalog,
    command_id: str,
    timeout_s: float,
    start: Mapping[int, int] | None,
) -> Outcome | None:
    """The events caused by ``command_id`` (accepted) or its rejection; None when nothing came
    within ``timeout_s``. A rejection ends the wait at once. An accepted command's events were
    written in one transaction, consecutively in its workflow's partition: they are all read
    when that partition yields a record of another cause, or is read to its end."""
    caused: list[Event] = []
    where: list[int] = []  # the partition of the command's events, once found

    def seen(msg: Message) -> bool:
        raw = msg.value()
        event = decode_event(raw or b"", catalog) if caused_by(raw, command_id) else None
        if event is None or event.causation_id != command_id:
            return bool(caused) and msg.partition() == where[0]  # past the command's events
        caused.append(event)
        where[:] = [msg.partition() or 0]
        return Outcome(command_id, tuple(caused)).rejection is not None

    def at_end(partition: int) -> bool:
        return bool(caused) and partition == where[0]

    watch(bootstrap, topic, start, timeout_s, seen, at_end)
    return Outcome(command_id, tuple(caused)) if caused else None
