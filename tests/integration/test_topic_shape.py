"""Start-up check of the topics' shape: whoever creates a topic first decides its partition
count and policy, and partition p of inputs, events and changelog must hold the same workflows.
A role whose settings disagree with the topics on the broker refuses to run, naming each
mismatch, instead of deciding on the wrong partitions.
"""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._config import ConfigResource  # not re-exported for mypy
from confluent_kafka.admin._resource import ResourceType

from es_sched.errors import ConfigError
from es_sched.kafka.topics import Topics, ensure_topic, ensure_topics, existing_partitions
from testkit.runtime import Env, Role
from testkit.settings import BOOTSTRAP, kafka_connection, unique_name
from testkit.wait import wait_until

pytestmark = pytest.mark.integration


def test_topics_this_process_creates_pass_and_a_second_check_is_quiet() -> None:
    topics = Topics(unique_name(), 3)
    created = ensure_topics(kafka_connection(BOOTSTRAP), topics)
    assert topics.events in created and len(created) == len(topics.all())
    assert (
        ensure_topics(kafka_connection(BOOTSTRAP), topics) == []
    )  # same settings: nothing to create, no error


def test_another_partition_count_is_refused_naming_the_topic_and_both_counts() -> None:
    prefix = unique_name()
    ensure_topics(kafka_connection(BOOTSTRAP), Topics(prefix, 3))
    with pytest.raises(ConfigError) as refused:
        ensure_topics(kafka_connection(BOOTSTRAP), Topics(prefix, 5))
    message = str(refused.value)
    assert f"{prefix}.events has 3 partitions, these settings expect 5" in message
    assert f"{prefix}.decider-state has 3 partitions" in message
    assert "ES_SCHED_KAFKA_PARTITIONS" in message


def test_an_existing_topics_partition_count_is_read_and_a_missing_topic_has_none() -> None:
    """What `es-sched demo` asks before it runs on topics an earlier run made (ADR 53)."""
    topics = Topics(unique_name(), 3)
    assert existing_partitions(kafka_connection(BOOTSTRAP), topics.events) is None
    ensure_topics(kafka_connection(BOOTSTRAP), topics)
    # A new client's metadata may lack a topic created a moment before (seen once, on a broker
    # started a minute earlier; likely KRaft, where the broker applies the controller's record
    # asynchronously): wait for the topic, then check its count.
    wait_until(
        lambda: existing_partitions(kafka_connection(BOOTSTRAP), topics.events) is not None,
        30,
        "the new topic",
    )
    assert existing_partitions(kafka_connection(BOOTSTRAP), topics.events) == 3


def test_a_compacted_or_expiring_events_topic_is_refused() -> None:
    prefix = unique_name()
    topics = Topics(prefix, 2)
    # Someone created the events topic as a compacted topic with a week's retention.
    ensure_topic(
        kafka_connection(BOOTSTRAP),
        topics.events,
        2,
        {"cleanup.policy": "compact", "retention.ms": "1"},
    )
    with pytest.raises(ConfigError) as refused:
        ensure_topics(kafka_connection(BOOTSTRAP), topics)
    message = str(refused.value)
    assert f"{prefix}.events has cleanup.policy=compact, es-sched needs delete" in message
    assert f"{prefix}.events has retention.ms=1, es-sched needs -1" in message


def test_a_role_started_on_mismatched_topics_exits_with_the_reason() -> None:
    env = Env(partitions=3)
    ensure_topics(kafka_connection(BOOTSTRAP), Topics(env.prefix, 2, assignment_partitions=4))
    role = Role(env, "decider")
    assert role.proc.wait(120) != 0
    assert f"{env.prefix}.commands has 2 partitions, these settings expect 3" in role.text()


def _config(name: str, *keys: str) -> dict[str, str | None]:
    """A topic's settings, once the broker describes it (a topic created a moment ago may be
    unknown to it for a moment)."""
    admin, found = AdminClient(kafka_connection(BOOTSTRAP).config()), {}

    def described() -> bool:
        [future] = admin.describe_configs([ConfigResource(ResourceType.TOPIC, name)]).values()
        try:
            found.update(future.result(timeout=30))
        except KafkaException:
            return False
        return True

    wait_until(described, 30, f"the broker to describe {name}")
    return {k: found[k].value for k in keys}


def test_the_ready_topic_keeps_records_for_the_reconciler_and_shorter_is_refused() -> None:
    """ADR 15: a task still waiting gets a fresh ready record every reconciler bound, so the
    ready topic must keep records at least two bounds and never drop them for size."""
    prefix = unique_name()
    bound_s = 4 * 24 * 3600.0  # four days: two floors are more than a week
    created = Topics(prefix, 2, requeue_after_s=bound_s)
    ensure_topics(kafka_connection(BOOTSTRAP), created)
    assert _config(created.ready, "retention.ms", "retention.bytes") == {
        "retention.ms": str(int(4 * bound_s * 1000)),
        "retention.bytes": "-1",
    }
    # A ready topic created before the reconciler (broker defaults: a week) passes a 300 s bound.
    old = unique_name()
    ensure_topic(kafka_connection(BOOTSTRAP), f"{old}.ready", 2)
    ensure_topics(kafka_connection(BOOTSTRAP), Topics(old, 2, requeue_after_s=300.0))
    # One kept ten minutes, and one with a size limit, are refused for a 600 s bound.
    short, sized = unique_name(), unique_name()
    ensure_topic(kafka_connection(BOOTSTRAP), f"{short}.ready", 2, {"retention.ms": "600000"})
    ensure_topic(kafka_connection(BOOTSTRAP), f"{sized}.ready", 2, {"retention.bytes": "1048576"})
    for name, expected in (
        (short, f"{short}.ready has retention.ms=600000, es-sched needs at least 1200000"),
        (sized, f"{sized}.ready has retention.bytes=1048576, es-sched needs -1"),
    ):
        with pytest.raises(ConfigError) as refused:
            ensure_topics(kafka_connection(BOOTSTRAP), Topics(name, 2, requeue_after_s=600.0))
        assert expected in str(refused.value)
        assert "ES_SCHED_RUN_REQUEUE_AFTER_S" in str(refused.value)
