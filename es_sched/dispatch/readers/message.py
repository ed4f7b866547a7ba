"""A consumed record's key and value as the decoders take them: confluent_kafka types both as
``str | bytes | None``, while keys are text and values are bytes (None: a tombstone)."""

from __future__ import annotations


def key_text(key: str | bytes | None) -> str:
    return key.decode() if isinstance(key, bytes) else (key or "")


def value_bytes(value: str | bytes | None) -> bytes | None:
    return value.encode() if isinstance(value, str) else value
