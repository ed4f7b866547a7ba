"""The definition registry's answer to a start: the TaskDefs its definition uses
(``domain.pins.taskdefs_used``), an inline sub-workflow's tasks included: on Kafka those tasks
run by their TaskDefs (retries, timeouts), as in ``defs simulate``, not by Conductor's defaults
for a task without one."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from es_sched.kafka.connection import KafkaConnection
from es_sched.kafka.registry import DefinitionRegistry
from tests.unit.domain.test_pins import TD_INLINE, TD_OUTER, TD_UNUSED, WITH_INLINE


@pytest.fixture
def registry() -> Iterator[DefinitionRegistry]:
    # Never read: nothing listens there (its client only logs a refused connection).
    reg = DefinitionRegistry(KafkaConnection.plaintext("127.0.0.1:1"), "unused-definitions")
    yield reg
    reg.close()


def test_taskdefs_for_covers_an_inline_sub_workflows_tasks(registry: DefinitionRegistry) -> None:
    registry.taskdefs = {str(td["name"]): td for td in (TD_UNUSED, TD_OUTER, TD_INLINE)}
    assert registry.taskdefs_for(WITH_INLINE) == [TD_INLINE, TD_OUTER]
