"""The checker's one adapter: fill a ``Log`` from the events, commands and task-results topics.

Every partition is read from its start to the end it had when reading began, committed records
only (``read_committed``, as the decider reads its inputs and the projectors the events). An
event that does not decode stops the check (only the decider writes events: it is a broken
log, not a record to skip); an input that does not decode, or sits under a key that is not its
workflow id, is kept as one the decider dead-letters (``LoggedInput.inp`` None).
"""

from __future__ import annotations

from collections.abc import Callable

from es_sched.audit.log import At, Log, LoggedEvent, LoggedInput
from es_sched.errors import EsSchedError, SchemaError
from es_sched.kafka.clients import consumer, read_partition
from es_sched.kafka.topics import topics_for
from es_sched.serialization import decode_input, decode_logged_event
from es_sched.settings import Settings

Progress = Callable[[int], None]  # records read so far
EVERY = 2000


def read_log(settings: Settings, progress: Progress | None = None) -> Log:
    topics, log, read = topics_for(settings), Log(), 0
    bootstrap = settings.kafka.bootstrap_servers
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
                    log.inputs.append(_input(data, key, at))
                read += 1
                if progress is not None and read % EVERY == 0:
                    progress(read)
    if progress is not None:
        progress(read)
    return log


def _input(data: bytes, key: bytes | str, at: At) -> LoggedInput:
    text = key.decode(errors="replace") if isinstance(key, bytes) else key
    try:
        return LoggedInput(decode_input(data), at, text)
    except SchemaError:
        return LoggedInput(None, at, text)


def _partitions(bootstrap: str, topic: str) -> list[int]:
    c = consumer(bootstrap, None)
    try:
        meta = c.list_topics(topic, timeout=30)
        found = meta.topics.get(topic)
        if found is None or found.error is not None:
            raise EsSchedError(f"topic {topic} does not exist (is the prefix right?)")
        return sorted(found.partitions)
    finally:
        c.close()
