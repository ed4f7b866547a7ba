"""``GET /api/v1/workers``: the fleet as the worker-status topic tells it.

Each worker's latest ``WorkerStatus`` (``api.readers.WorkerBoard``: the compacted topic folded
by worker, kept up to date by a background thread; ``readAgeMs`` says how old the answer is):
what it declared it has (capacity), what the tasks it runs need (use), its version, pool, types
and last heartbeat (the report's ``sent_at``). Health is the rule the dispatcher applies
(``es_sched.liveness``, with ``ES_SCHED_DISPATCH_SUSPECT_AFTER_S`` and ``..._DEAD_AFTER_S``) to
that heartbeat; ``banned`` is a ``ban-version`` record on the config topic (kept by the same
thread). The dispatcher's blacklist (a worker failing most of its recent tasks, for a
cool-down) lives in its memory and is published nowhere but its log, so ``blacklisted`` is
``None`` ("unknown") rather than a guess.
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from datetime import UTC, datetime

from fastapi import APIRouter, Depends

from es_sched.api.auth import Principal, require
from es_sched.api.native.models import WorkerInfo, Workers
from es_sched.api.readers import worker_board
from es_sched.api.services import Services, services
from es_sched.kafka.topics import topics_for
from es_sched.liveness import Liveness, heard_at
from es_sched.serialization import wire

router = APIRouter()
VIEWER = require("viewer")
SVC = Depends(services)


@router.get("/workers", response_model=Workers)
def get_workers(
    svc: Services = SVC,
    who: Principal = VIEWER,
) -> Workers:
    fleet = worker_board(svc).snapshot()
    now = datetime.now(UTC)
    d = svc.settings.dispatch
    liveness = Liveness(d.suspect_after_s, d.dead_after_s)
    workers = [
        worker_info(s, liveness, now, fleet.banned) for _, s in sorted(fleet.workers.items())
    ]
    return Workers(
        workers=workers,
        topic=topics_for(svc.settings).worker_status,
        readUpTo=fleet.read_up_to,
        readAgeMs=round(fleet.age_s() * 1000, 1),
    )


def worker_info(
    s: wire.WorkerStatus, liveness: Liveness, now: datetime, banned: AbstractSet[str]
) -> WorkerInfo:
    sent = wire.sent_time(s)
    # dead_after 0: a report is heard from when it was sent, not when we read it
    seen = heard_at(sent, now, 0.0) if sent is not None else None
    health = liveness.health(seen, now) if seen is not None else "unknown"
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
        lastHeartbeat=seen,
        health=health,
        banned=s.version in banned,
        blacklisted=None,
    )
