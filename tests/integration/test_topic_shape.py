"""Start-up check of the topics' shape: whoever creates a topic first decides its partition
count and policy, and partition p of inputs, events and changelog must hold the same workflows.
A role whose settings disagree with the topics on the broker refuses to run, naming each
mismatch, instead of deciding on the wrong partitions.
"""

from __future__ import annotations

import pytest

from es_sched.errors import ConfigError
from es_sched.kafka.topics import Topics, ensure_topic, ensure_topics
from tests.integration.runtime_harness import Env, Role
from tests.support.settings import BOOTSTRAP, unique_name

pytestmark = pytest.mark.integration


def test_topics_this_process_creates_pass_and_a_second_check_is_quiet() -> None:
    topics = Topics(unique_name(), 3)
    created = ensure_topics(BOOTSTRAP, topics)
    assert topics.events in created and len(created) == len(topics.all())
    assert ensure_topics(BOOTSTRAP, topics) == []  # same settings: nothing to create, no error


def test_another_partition_count_is_refused_naming_the_topic_and_both_counts() -> None:
    prefix = unique_name()
    ensure_topics(BOOTSTRAP, Topics(prefix, 3))
    with pytest.raises(ConfigError) as refused:
        ensure_topics(BOOTSTRAP, Topics(prefix, 5))
    message = str(refused.value)
    assert f"{prefix}.events has 3 partitions, these settings expect 5" in message
    assert f"{prefix}.decider-state has 3 partitions" in message
    assert "ES_SCHED_KAFKA_PARTITIONS" in message


def test_a_compacted_or_expiring_events_topic_is_refused() -> None:
    prefix = unique_name()
    topics = Topics(prefix, 2)
    # Someone created the events topic as a compacted topic with a week's retention.
    ensure_topic(BOOTSTRAP, topics.events, 2, {"cleanup.policy": "compact", "retention.ms": "1"})
    with pytest.raises(ConfigError) as refused:
        ensure_topics(BOOTSTRAP, topics)
    message = str(refused.value)
    assert f"{prefix}.events has cleanup.policy=compact, es-sched needs delete" in message
    assert f"{prefix}.events has retention.ms=1, es-sched needs -1" in message


def test_a_role_started_on_mismatched_topics_exits_with_the_reason() -> None:
    env = Env(partitions=3)
    ensure_topics(BOOTSTRAP, Topics(env.prefix, 2, assignment_partitions=4))
    role = Role(env, "decider")
    assert role.proc.wait(120) != 0
    assert f"{env.prefix}.commands has 2 partitions, these settings expect 3" in role.text()
