"""Delete the topics a test created, so one broker survives the whole suite.

Every integration test works under its own topic prefix; left behind, a run creates thousands
of partitions and a 512 MB single-node controller falls over. An autouse fixture snapshots the
topic list before each test and deletes what is new after it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

BOOTSTRAP = os.environ.get("ES_SCHED_KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")


def _topics(admin: AdminClient) -> set[str]:
    return {t for t in admin.list_topics(timeout=30).topics if not t.startswith("__")}


@pytest.fixture(autouse=True)
def delete_new_topics() -> Iterator[None]:
    admin = AdminClient({"bootstrap.servers": BOOTSTRAP, "log_level": 0})
    try:
        before = _topics(admin)
    except KafkaException:
        before = None  # no broker: the test will say so itself
    yield
    if before is None:
        return
    created = sorted(_topics(admin) - before)
    if created:
        for future in admin.delete_topics(created, operation_timeout=30).values():
            with contextlib.suppress(KafkaException):  # already gone, or still being deleted
                future.result(60)
