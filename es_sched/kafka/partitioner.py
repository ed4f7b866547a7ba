"""Kafka's murmur2 partitioner, computed here so a process knows where a keyed record lands.

``partition_for(key, n)`` is Java's ``Utils.murmur2`` made positive with ``& 0x7fffffff``, the
same choice librdkafka's ``murmur2_random`` (our producers' partitioner, see ``clients.py``)
makes for a keyed record: a worker reads exactly the assignment partition its id maps to
(ADR 5), and the CLI finds the partition of a workflow's commands.
"""

from __future__ import annotations

_M32 = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 (``org.apache.kafka.common.utils.Utils.murmur2``) as a signed 32-bit int."""
    m, length = 0x5BD1E995, len(data)
    h = (0x9747B28C ^ length) & _M32
    for i in range(0, length - length % 4, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * m) & _M32
        k ^= k >> 24
        k = (k * m) & _M32
        h = ((h * m) & _M32) ^ k
    tail, rest = length & ~3, length % 4
    if rest == 3:
        h ^= data[tail + 2] << 16
    if rest >= 2:
        h ^= data[tail + 1] << 8
    if rest >= 1:
        h ^= data[tail]
        h = (h * m) & _M32
    h ^= h >> 13
    h = (h * m) & _M32
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(key: bytes, partitions: int) -> int:
    return (murmur2(key) & 0x7FFFFFFF) % partitions
