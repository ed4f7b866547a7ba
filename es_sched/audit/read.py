"""The checker's one adapter: fill a ``Log`` from the events, commands and task-results topics
and the blacklistings of the config topic.

Every partition is read from its start to the end it had when reading began, committed records
only (``read_committed``, as the decider reads its inputs and the projectors the events). An
event that does not decode stops the check (only the decider writes events: it is a broken
log, not a record to skip); an input the decider refuses (``domain.intake``, with the cap of
``ES_SCHED_RUN_COMMAND_MAX_BYTES`` as the decider reads it) is kept as one it dead-letters.
"""

from __future__ import annotations

from collections.abc import Callable

from es_sched.audit.log import At, Log, LoggedBlacklisting, LoggedEvent, LoggedInput
from es_sched.blacklist import Blacklisting, of_record
from es_sched.domain.intake import record_refusal
from es_sched.errors import EsSchedError, SchemaError
from es_sched.kafka.clients import consumer, read_partition
from es_sched.kafka.connection import KafkaConnection, connection
from es_sched.kafka.topics import topics_for
from es_sched.serialization import config as dc
from es_sched.serialization import decode_input, decode_logged_event
from es_sched.settings import Settings

Progress = Callable[[int], None]  # records read so far
EVERY = 2000
BLACKLIST = "blacklist:"


def read_log(settings: Settings, progress: Progress | None = None) -> Log:
    topics, log, read = topics_for(settings), Log(), 0
    bootstrap = connection(settings.kafka)
    cap = settings.runtime.command_max_bytes  # the decider's cap (``domain.intake``)
    for topic in (topics.events, topics.commands, topics.task_results):
        for part in _partitions(bootstrap, topic):
            for msg in read_partition(bootstrap, topic, part):
                at = At(topic, part, msg.offset() or 0)
                raw, key = msg.value() or b"", msg.key() or b""
                data = raw if isinstance(raw, bytes) else raw.encode()
                if topic == topics.events:
                    try:
                        log.events.append(LoggedEvent(decode_logged_event(data), at))
                    except SchemaError as exc:
                        raise EsSchedError(f"{at}: not an event: {exc}") from exc
                else:
                    log.inputs.append(_input(data, key, at, cap))
                read += 1
                if progress is not None and read % EVERY == 0:
                    progress(read)
    log.blacklistings = _blacklistings(bootstrap, topics.config)
    if progress is not None:
        progress(read)
    return log


def _blacklistings(bootstrap: KafkaConnection, topic: str) -> list[LoggedBlacklisting]:
    """Every ``blacklist:<worker>`` decision the config topic still holds (compaction keeps a
    worker's latest record; a lift replaces its decision). A record that does not decode is the
    dispatcher's to dead-letter, not a broken log: it is skipped."""
    found: list[LoggedBlacklisting] = []
    try:
        parts = _partitions(bootstrap, topic)
    except EsSchedError:
        return found  # a deployment from before the config topic
    for part in parts:
        for msg in read_partition(bootstrap, topic, part):
            raw_key, raw = msg.key() or b"", msg.value()
            key = raw_key.decode(errors="replace") if isinstance(raw_key, bytes) else raw_key
            if raw is None or not key.startswith(BLACKLIST):
                continue
            try:
                value = dc.parse(key, raw if isinstance(raw, bytes) else raw.encode()).value
            except SchemaError:
                continue
            decided = of_record(key.removeprefix(BLACKLIST), value or {})
            if isinstance(decided, Blacklisting):
                found.append(LoggedBlacklisting(decided, At(topic, part, msg.offset() or 0)))
    return found


def _input(data: bytes, key: bytes | str, at: At, cap: int) -> LoggedInput:
    """The input as the decider reads it: a record ``intake`` refuses by its bytes is not
    decoded (the decider never decodes it either), nor is one that is not an input."""
    text = key.decode(errors="replace") if isinstance(key, bytes) else key
    if record_refusal(data, cap) is not None:
        return LoggedInput(None, at, text)
    try:
        return LoggedInput(decode_input(data), at, text)
    except SchemaError:
        return LoggedInput(None, at, text)


def _partitions(bootstrap: KafkaConnection, topic: str) -> list[int]:
    c = consumer(bootstrap, None)
    try:
        meta = c.list_topics(topic, timeout=30)
        found = meta.topics.get(topic)
        if found is None or found.error is not None:
            raise EsSchedError(f"topic {topic} does not exist (is the prefix right?)")
        return sorted(found.partitions)
    finally:
        c.close()
