"""``GET /api/v1/workers`` and ``POST /api/v1/workers/{id}/lift``: the fleet as the
worker-status and config topics tell it (``es_sched.api.fleet``).

Each worker's latest ``WorkerStatus`` (the compacted topic folded by worker, kept up to date
by a background thread, ``api.readers.WorkerBoard``; ``readAgeMs`` says how old it is): what
it declared it has (capacity), what the tasks it runs need (use), its version, pool, types and
last heartbeat (the report's ``sent_at``). Health is the rule the dispatcher applies
(``es_sched.liveness``, with ``ES_SCHED_DISPATCH_SUSPECT_AFTER_S`` and ``..._DEAD_AFTER_S``) to
that heartbeat; ``banned`` is a ``ban-version`` record on the config topic; ``blacklisted`` a
``blacklist:<worker>`` record in force (ADR 58), with the failures that caused it and when it
ends. A lift (operator) writes the record every dispatcher applies and answers once this
process's kept fleet shows it (the next read sees it).
"""

from __future__ import annotations

from fastapi import APIRouter, Depends

from es_sched.api.auth import Principal, require
from es_sched.api.errors import ApiError
from es_sched.api.fleet import Fleet, lift, read_fleet
from es_sched.api.native.models import BlacklistInfo, Lift, WorkerInfo, Workers
from es_sched.api.services import Services, services
from es_sched.blacklist import Blacklisting
from es_sched.kafka.topics import topics_for
from es_sched.serialization import wire

router = APIRouter()
VIEWER = require("viewer")
OPERATOR = require("operator")
SVC = Depends(services)


@router.get("/workers", response_model=Workers)
def get_workers(
    svc: Services = SVC,
    who: Principal = VIEWER,
) -> Workers:
    return workers_of(svc, read_fleet(svc))


def workers_of(svc: Services, fleet: Fleet) -> Workers:
    workers = [worker_info(s, fleet) for _, s in sorted(fleet.statuses.items())]
    return Workers(
        workers=workers,
        topic=topics_for(svc.settings).worker_status,
        readUpTo=fleet.read_up_to,
        readAgeMs=round(fleet.read_age_s * 1000, 1),
    )


@router.post("/workers/{worker_id}/lift", response_model=Lift)
def lift_blacklisting(worker_id: str, svc: Services = SVC, who: Principal = OPERATOR) -> Lift:
    """End a worker's blacklisting now; 404 when none is in force."""
    fleet = read_fleet(svc)
    if worker_id not in fleet.blacklist:
        raise ApiError(404, f"worker {worker_id} is not blacklisted")
    done = lift(svc, worker_id, who.name)
    return Lift(workerId=worker_id, liftedAt=done.at, by=done.by)


def blacklist_info(b: Blacklisting) -> BlacklistInfo:
    return BlacklistInfo(
        since=b.at,
        until=b.until,
        why=b.why,
        failures=[
            {"taskId": f.task_id, "reason": f.reason, "at": f.at, "fault": f.fault}
            for f in b.failures
        ],
        decidedBy=b.by,
    )


def worker_info(s: wire.WorkerStatus, fleet: Fleet) -> WorkerInfo:
    b = fleet.blacklist.get(s.worker_id)
    lifted = fleet.lifted.get(s.worker_id)
    sent = wire.sent_time(s)
    return WorkerInfo(
        workerId=s.worker_id,
        pool=s.pool or "default",
        version=s.version,
        types=sorted(s.types),
        capacity={
            "cpu": s.cpu,
            "memoryMb": s.memory_mb,
            "slots": max(1, s.concurrency),
            "gpus": [
                {"index": g.index, "totalMb": g.total_mb, "freeMb": g.free_mb, "name": g.name}
                for g in s.gpus
            ],
            "custom": dict(s.custom),
        },
        used=dict(s.used),
        running=list(s.running),
        lastHeartbeat=min(sent, fleet.now) if sent is not None else None,
        health=fleet.health[s.worker_id],
        banned=s.version in fleet.banned_versions,
        blacklisted=b is not None,
        blacklist=None if b is None else blacklist_info(b),
        liftedAt=None if lifted is None else lifted.at,
        liftedBy=None if lifted is None else lifted.by,
    )
