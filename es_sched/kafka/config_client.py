"""The config topic's client: publish one run-time setting, or read the settings in force.

Records are encoded and validated by ``es_sched.serialization.config`` (the dispatcher's own
parser) before they are produced, so a bad record never reaches the topic; ``current`` folds
the compacted topic by key through the same parser.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from confluent_kafka import Message

from es_sched.errors import InfrastructureError, SchemaError
from es_sched.kafka.clients import producer, read_partition
from es_sched.kafka.connection import connection
from es_sched.kafka.topics import ensure_topics, topics_for
from es_sched.serialization import config as dc
from es_sched.settings import Settings


def publish(settings: Settings, key: str, value: dict[str, Any] | None) -> None:
    """Validate and produce one config record (None: a tombstone that removes the setting)."""
    raw = dc.encode(value)
    dc.parse(key, raw)  # the dispatcher's own check: a bad record never reaches the topic
    topics = topics_for(settings)
    ensure_topics(connection(settings.kafka), topics)
    p = producer(connection(settings.kafka))
    p.produce(topics.config, key=key.encode(), value=raw)
    if p.flush(30):
        raise InfrastructureError(f"config record {key!r} was not delivered")


def current(settings: Settings) -> dict[str, dict[str, Any]]:
    """The config topic folded by key: the settings in force (tombstoned keys left out)."""
    topics = topics_for(settings)
    out: dict[str, dict[str, Any]] = {}
    fold(read_partition(connection(settings.kafka), topics.config, 0), out)
    return out


def fold(msgs: Iterable[Message], out: dict[str, dict[str, Any]]) -> None:
    """Fold config records into ``out`` by key (a tombstone removes the key); ``current`` and
    the API's kept fleet (``api.readers.WorkerBoard``) fold alike."""
    for msg in msgs:
        raw_key, value = msg.key(), msg.value()
        key = raw_key.decode() if isinstance(raw_key, bytes) else (raw_key or "")
        if value is None:
            out.pop(key, None)
            continue
        try:
            out[key] = dc.parse(key, value).value or {}
        except SchemaError as exc:  # not written by this CLI; the dispatcher dead-letters it
            out[key] = {"unreadable": str(exc)[:200]}
