"""``POST /api/v1/workflows/{id}/verify``: fold one workflow's events and compare the read model.

The events are read from the log itself, at the partition and offsets the PostgreSQL archive
records for them (a bounded read of one partition, not a scan of the topic), folded by
``domain.evolve`` — the decider's core, not the
projection's ``views.apply`` — and compared with the workflow and task rows by the auditors'
own comparison (``projections.replay.verify_store``), so a projection bug shows as differences.
The archive and the rows are written in one transaction per batch but read here in two; when
the row is ahead of the events read (the projector wrote in between) both are read again.
``es-sched audit check`` does the same from the log itself for every workflow.
"""

from __future__ import annotations

import time

from confluent_kafka import TopicPartition
from fastapi import APIRouter, Depends

from es_sched.api.auth import Principal, require
from es_sched.api.errors import ApiError
from es_sched.api.native.models import Difference, Verified
from es_sched.api.read_model_freshness import freshness_of
from es_sched.api.services import Services, services
from es_sched.domain.events import Event
from es_sched.domain.evolve import advance
from es_sched.domain.refusals import is_refusal
from es_sched.domain.state import WorkflowState
from es_sched.errors import DomainError
from es_sched.kafka.clients import consumer
from es_sched.kafka.connection import connection
from es_sched.kafka.topics import topics_for
from es_sched.projections.postgres import queries
from es_sched.projections.replay import Replayed, verify_store
from es_sched.serialization import decode_logged_event

router = APIRouter()
OPERATOR = require("operator")
SVC = Depends(services)
PAGE = 1000
ATTEMPTS = 3
READ_S = 30.0


@router.post("/workflows/{workflow_id}/verify", response_model=Verified)
def verify(
    workflow_id: str,
    svc: Services = SVC,
    who: Principal = OPERATOR,
) -> Verified:
    """Replay the workflow's archived events and compare with its read-model rows."""
    fresh = freshness_of(svc)
    for _ in range(ATTEMPTS):
        state, events = fold(svc, workflow_id)
        found = verify_store(Replayed(states={workflow_id: state}), svc.pg.get(), [workflow_id])
        row, _tasks = queries.workflow(svc.engine, workflow_id)
        if row is None or row["version"] <= state.seq:
            break  # the rows are not ahead of the events we folded
    differences = [
        Difference(kind=m.kind, id=m.id, field=m.field, log=m.log, store=m.store) for m in found
    ]
    return Verified(
        workflowId=workflow_id,
        equal=not differences,
        events=events,
        differences=differences,
        freshness=fresh,
    )


def fold(svc: Services, workflow_id: str) -> tuple[WorkflowState, int]:
    """The workflow's events as the log has them, folded; the archive says where they are."""
    where: list[tuple[int, int]] = []
    start = 0
    while True:
        rows = queries.history(svc.engine, workflow_id, start, PAGE)
        where += [(r["kafka_partition"], r["kafka_offset"]) for r in rows]
        if len(rows) < PAGE:
            break
        start = rows[-1]["seq"] + 1
    if not where:
        raise ApiError(404, f"no events of workflow {workflow_id} in the archive")
    state: WorkflowState | None = None
    count = 0
    for event in logged_events(svc, workflow_id, where):
        try:
            state = advance(state, event)
        except DomainError as exc:
            raise ApiError(409, f"the history does not fold at seq {event.seq}: {exc}") from None
        count += 1
    assert state is not None
    return state, count


def logged_events(svc: Services, workflow_id: str, where: list[tuple[int, int]]) -> list[Event]:
    """The workflow's records of the events topic between the first and last offsets the
    archive names (its one partition: the topic is keyed by workflow id), read committed."""
    partition = where[0][0]
    first, last = min(o for _, o in where), max(o for _, o in where)
    topic = topics_for(svc.settings).events
    reader = consumer(connection(svc.settings.kafka), None)
    key, out = workflow_id.encode(), []
    deadline = time.monotonic() + READ_S
    try:
        reader.assign([TopicPartition(topic, partition, first)])
        while time.monotonic() < deadline:
            msg = reader.poll(0.5)
            if msg is None or msg.error() is not None:
                continue
            if msg.key() == key:
                raw = msg.value()
                event = decode_logged_event(raw if isinstance(raw, bytes) else b"")
                if not is_refusal(event):
                    out.append(event)
            if (msg.offset() or 0) >= last:
                return out
    finally:
        reader.close()
    raise ApiError(504, f"reading {topic}[{partition}] {first}..{last} took over {READ_S:g}s")
