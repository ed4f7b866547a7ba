"""What a decider keeps per workflow: task definitions shared, an ended state's maps plain.

``domain.parsed`` shares one parsed mapping between workflows started from byte-equal TaskDef
documents; ``evolve`` settles an ended workflow's task maps into plain ``dict``s. Both are
memory per kept workflow (ADR 18 keeps ended states until retired), and neither may change
what a state says.
"""

from __future__ import annotations

import copy
from typing import Any

from es_sched.domain.definitions import settings_for
from es_sched.domain.layered import Layered
from es_sched.domain.parsed import taskdefs_by_name
from tests.unit.domain.harness import Driver, task, workflow

DEFINITION = workflow(task("encode"), task("package"))


def taskdefs(retries: int = 2) -> list[dict[str, Any]]:
    return [
        {"name": "encode", "retryCount": retries, "timeoutSeconds": 600, "priority": 1},
        {"name": "package", "retryCount": 0, "resources": {"cpu": 1, "memory_mb": 256}},
    ]


def test_workflows_started_from_equal_taskdefs_share_one_mapping() -> None:
    one = Driver(copy.deepcopy(DEFINITION), taskdefs=taskdefs(), workflow_id="wf-a")
    two = Driver(copy.deepcopy(DEFINITION), taskdefs=taskdefs(), workflow_id="wf-b")
    other = Driver(copy.deepcopy(DEFINITION), taskdefs=taskdefs(retries=5), workflow_id="wf-c")
    assert one.st.taskdefs is two.st.taskdefs  # separate documents, equal bytes: one parse
    assert other.st.taskdefs is not one.st.taskdefs
    encode = DEFINITION["tasks"][0]
    parsed = one.st.definition.tasks[0]
    assert encode["name"] == parsed.name
    assert settings_for(parsed, one.st.taskdefs).retry_count == 2
    assert settings_for(parsed, other.st.taskdefs).retry_count == 5


def test_only_byte_equal_documents_share_and_each_keeps_its_own_key_order() -> None:
    docs = taskdefs()
    reordered = [dict(reversed(list(doc.items()))) for doc in docs]
    first, second = taskdefs_by_name(docs), taskdefs_by_name(reordered)
    assert second is not first and second == first  # equal content, parsed apart
    assert list(second["encode"].raw) == list(reordered[0])  # the document as it was sent


def test_documents_that_are_not_json_are_parsed_for_each_caller() -> None:
    docs: list[Any] = [{"name": "encode", "retryCount": 1, "tags": {"a"}}]  # a set: no JSON
    first, second = taskdefs_by_name(docs), taskdefs_by_name(docs)
    assert first is not second and first == second
    assert first["encode"].overrides["retry_count"] == 1


def test_an_ended_workflow_keeps_its_task_maps_as_plain_dicts() -> None:
    drv = Driver(workflow(task("encode"), task("package")))
    drv.report("encode")
    before = drv.st
    assert isinstance(before.tasks, Layered)  # a running state, as decisions copy it
    drv.report("package")
    assert drv.st.status == "COMPLETED"
    assert type(drv.st.tasks) is dict and type(drv.st.latest) is dict
    assert list(drv.st.tasks) == list(before.tasks)  # the same tasks, in their order
    assert drv.st.latest == dict(before.latest.items())
    assert [status for _, _, status in drv.rows()] == ["COMPLETED", "COMPLETED"]


def test_a_failed_workflow_is_settled_too() -> None:
    drv = Driver(workflow(task("encode"), task("package")))
    drv.report("encode", status="TERMINAL")
    assert drv.st.status == "FAILED"
    assert type(drv.st.tasks) is dict and type(drv.st.latest) is dict
    assert [(ref, status) for ref, _, status in drv.rows()] == [
        ("encode", "FAILED_WITH_TERMINAL_ERROR")
    ]


def test_tasks_scheduled_from_the_same_settings_share_their_resources() -> None:
    one = Driver(copy.deepcopy(DEFINITION), taskdefs=taskdefs(), workflow_id="wf-d")
    two = Driver(copy.deepcopy(DEFINITION), taskdefs=taskdefs(), workflow_id="wf-e")
    for drv in (one, two):
        drv.report("encode")
    declared = {"cpu": 1.0, "memory_mb": 256, "gpu_memory_mb": 0, "custom": {}}
    assert one.latest("package").resources == declared  # the TaskDef's
    assert one.latest("package").resources is two.latest("package").resources
    none = {"cpu": 0.0, "memory_mb": 0, "gpu_memory_mb": 0, "custom": {}}
    assert one.latest("encode").resources == none  # its TaskDef declares none
    assert one.latest("encode").resources is two.latest("encode").resources
