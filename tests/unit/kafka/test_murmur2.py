"""Kafka's murmur2 partitioner, which tells a worker the partition its id's records land on.

Vectors: Kafka's own ``UtilsTest.testMurmur2``, the values Akka's Murmur2Spec took from
Kafka's ``Utils.murmur2``, and the empty key (librdkafka's murmur2 unit test, 0x106e08d9).
That librdkafka's ``murmur2_random`` producer agrees on a live broker is checked in
tests/integration/test_worker_sdk.py.
"""

from __future__ import annotations

import pytest

from es_sched.kafka.partitioner import murmur2, partition_for


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"", 275646681),
        (b"21", -973932308),
        (b"foobar", -790332482),
        (b"a-little-bit-long-string", -985981536),
        (b"a-little-bit-longer-string", -1486304829),
        (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
        (b"abc", 479470107),
        (b"1", -1993445489),
        (b"12", 126087238),
        (b"123", -267702483),
        (b"1234", -1614185708),
        (b"12345", -1188365604),
    ],
)
def test_matches_kafka_utils_murmur2(data: bytes, expected: int) -> None:
    assert murmur2(data) == expected


def test_partition_is_the_positive_hash_modulo_the_count() -> None:
    assert partition_for(b"21", 64) == (-973932308 & 0x7FFFFFFF) % 64
    assert all(0 <= partition_for(f"w{i}".encode(), 7) < 7 for i in range(200))
    # every partition is reachable, so workers spread over the topic
    assert {partition_for(f"w{i}".encode(), 7) for i in range(200)} == set(range(7))
