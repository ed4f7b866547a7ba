"""Dead letters: a record es-sched cannot process goes here with its origin and the reason.

The dead-letter record keeps the original key and bytes untouched; headers say where it came
from (``origin.topic``, ``origin.partition``, ``origin.offset``), why (``error.reason``,
``error.class``) and who gave up (``error.role``). It is produced in the same transaction that
moves the consumer past the original, so a poison record is never lost and never blocks its
partition.
"""

from __future__ import annotations

from confluent_kafka import Message

Headers = list[tuple[str, str | bytes | None]]


def headers_for(msg: Message, reason: str, error_class: str, role: str) -> Headers:
    return [
        ("origin.topic", (msg.topic() or "").encode()),
        ("origin.partition", str(msg.partition()).encode()),
        ("origin.offset", str(msg.offset()).encode()),
        ("error.reason", reason.encode()[:4000]),
        ("error.class", error_class.encode()),
        ("error.role", role.encode()),
    ]


def header_map(msg: Message) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in msg.headers() or []:
        key, value = item[0], item[1]
        out[str(key)] = (
            value.decode(errors="replace") if isinstance(value, bytes) else str(value or "")
        )
    return out
