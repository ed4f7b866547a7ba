"""``POST /api/v1/workflows/{id}/verify``: fold one workflow's events and compare the read model.

The events come from the PostgreSQL archive (the log's records as the projector copied them,
with their partition and offset), folded by ``domain.evolve`` — the decider's core, not the
projection's ``views.apply`` — and compared with the workflow and task rows by the auditors'
own comparison (``projections.replay.verify_store``), so a projection bug shows as differences.
The archive and the rows are written in one transaction per batch but read here in two; when
the row is ahead of the events read (the projector wrote in between) both are read again.
``es-sched audit check`` does the same from the log itself for every workflow.
"""

from __future__ import annotations

import orjson
from fastapi import APIRouter, Depends

from es_sched.api.auth import Principal, require
from es_sched.api.errors import ApiError
from es_sched.api.native.fresh import freshness_of
from es_sched.api.native.models import Difference, Verified
from es_sched.api.services import Services, services
from es_sched.domain.evolve import advance
from es_sched.domain.state import WorkflowState
from es_sched.errors import DomainError
from es_sched.projections.postgres import queries
from es_sched.projections.replay import Replayed, verify_store
from es_sched.serialization import decode_logged_event

router = APIRouter()
OPERATOR = require("operator")
SVC = Depends(services)
PAGE = 1000
ATTEMPTS = 3


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
        workflowId=workflow_id, equal=not differences, events=events,
        differences=differences, freshness=fresh,
    )  # fmt: skip


def fold(svc: Services, workflow_id: str) -> tuple[WorkflowState, int]:
    state: WorkflowState | None = None
    count, start = 0, 0
    while True:
        rows = queries.history(svc.engine, workflow_id, start, PAGE)
        for r in rows:
            event = decode_logged_event(orjson.dumps(r["payload"]))
            try:
                state = advance(state, event)
            except DomainError as exc:
                raise ApiError(
                    409, f"the archived history does not fold at seq {r['seq']}: {exc}"
                ) from None
            count += 1
        if len(rows) < PAGE:
            break
        start = rows[-1]["seq"] + 1
    if state is None:
        raise ApiError(404, f"no events of workflow {workflow_id} in the archive")
    return state, count
