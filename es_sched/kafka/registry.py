"""Definitions and TaskDefs as a compacted topic, read into memory.

Keys: ``workflow:<name>:<version>`` for a workflow definition and ``taskdef:<name>`` for a
Conductor TaskDef; values are the documents as JSON (a tombstone deletes). The record format
and its validation are ``es_sched.serialization.definitions``. ``defs push`` writes them; the
CLI and the decider read them with ``DefinitionRegistry``, which tails the topic without a
consumer group (every reader sees everything).

A record that does not decode deletes its key, as a tombstone would: every reader, before or
after compaction, then agrees that the key has no definition. It is logged and kept in
``rejected`` (key -> reason); a reader has no producer, and each reader dead-lettering the same
record would only duplicate it.
"""

from __future__ import annotations

import logging
from typing import Any

from confluent_kafka import KafkaError, TopicPartition

from es_sched.domain.pins import taskdefs_used
from es_sched.errors import SchemaError
from es_sched.kafka.clients import consumer
from es_sched.kafka.connection import KafkaConnection
from es_sched.kafka.partition_ends import Ends
from es_sched.serialization.definitions import decode_definition

log = logging.getLogger(__name__)


class DefinitionRegistry:
    def __init__(self, bootstrap: KafkaConnection, topic: str) -> None:
        self.workflows: dict[tuple[str, int], dict[str, Any]] = {}
        self.taskdefs: dict[str, dict[str, Any]] = {}
        self._taskdefs_cache: dict[int, tuple[dict[str, Any], list[dict[str, Any]]]] = {}
        self.rejected: dict[str, str] = {}  # key -> why its last record did not decode
        self._consumer = consumer(bootstrap, None, **{"enable.partition.eof": True})
        self._consumer.assign([TopicPartition(topic, 0, 0)])
        self._topic = topic
        self._bootstrap = bootstrap
        self._ends: Ends | None = None  # made by the first catch_up

    def catch_up(self, timeout_s: float = 10.0) -> None:
        """Read until the end of the topic as it is now. The end is asked on a client of its own
        (``kafka.partition_ends``): asked on the reader, it would wait out the fetch the broker
        holds open for it, each catch-up of an API page."""
        self._ends = self._ends or Ends(self._bootstrap)
        high = self._ends.high(TopicPartition(self._topic, 0), timeout_s)
        position = self._consumer.position([TopicPartition(self._topic, 0)])[0].offset
        while position < high:
            msg = self._consumer.poll(timeout_s)
            if msg is None:
                break
            err = msg.error()
            if err is not None:
                # An end-of-partition event may be an old one, queued when an earlier call had
                # read to the end: it ends this call only if it is at the end read above
                # (else a definition pushed a moment ago would be missed).
                if err.code() == KafkaError._PARTITION_EOF and (msg.offset() or 0) >= high:
                    break
                continue
            self._apply(_bytes(msg.key()), _bytes(msg.value()))
            position = (msg.offset() or 0) + 1

    def poll(self) -> None:
        """Apply whatever arrived since the last call, without waiting."""
        while True:
            msg = self._consumer.poll(0)
            if msg is None:
                return
            err = msg.error()
            if err is None:
                self._apply(_bytes(msg.key()), _bytes(msg.value()))
            elif err.code() == KafkaError._PARTITION_EOF:
                return

    def _apply(self, key: bytes | None, value: bytes | None) -> None:
        self._taskdefs_cache.clear()
        text = (key or b"").decode(errors="replace")
        try:
            record = decode_definition(text, value)
        except SchemaError as exc:
            log.warning("definitions %r: %s; the key is treated as deleted", text, exc)
            self.rejected[text] = str(exc)
            kind, _, rest = text.partition(":")
            if kind == "workflow":
                self.workflows = {
                    k: v for k, v in self.workflows.items() if f"{k[0]}:{k[1]}" != rest
                }
            elif kind == "taskdef":
                self.taskdefs.pop(rest, None)
            return
        self.rejected.pop(text, None)
        if record.kind == "workflow":
            assert record.version is not None
            if record.doc is None:
                self.workflows.pop((record.name, record.version), None)
            else:
                self.workflows[(record.name, record.version)] = record.doc
        elif record.doc is None:
            self.taskdefs.pop(record.name, None)
        else:
            self.taskdefs[record.name] = record.doc

    def workflow(self, name: str, version: int | None = None) -> dict[str, Any] | None:
        if version is not None:
            return self.workflows.get((name, version))
        versions = [v for (n, v) in self.workflows if n == name]
        return self.workflows[(name, max(versions))] if versions else None

    def taskdefs_for(self, definition: dict[str, Any]) -> list[dict[str, Any]]:
        """The TaskDefs a definition uses; the same list object until either changes, so the
        core's caches recognise it by identity."""
        cached = self._taskdefs_cache.get(id(definition))
        if cached is not None and cached[0] is definition:
            return cached[1]
        found = taskdefs_used(definition, self.taskdefs)
        self._taskdefs_cache[id(definition)] = (definition, found)
        return found

    def close(self) -> None:
        self._consumer.close()
        if self._ends is not None:
            self._ends.close()


def _bytes(value: str | bytes | None) -> bytes | None:
    return value.encode() if isinstance(value, str) else value
