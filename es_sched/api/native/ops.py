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

Worker versions (ADR 70): the answer also lists the rollouts (``rollout:<T>``: share given,
failure rates seen, promoted or stopped, by whom), the version stops and the rules;
``versionStopped`` on a worker says which types its version may not take. Operators start a
rollout (``POST /api/v1/workers/rollouts``), revert a rollout's promotion or stop
(``POST /api/v1/workers/rollouts/{type}/revert``) and lift a version's stop
(``POST /api/v1/workers/version-stops/{type}/{version}/lift``); each answers once the next
read shows it.
"""

from __future__ import annotations

from datetime import UTC, datetime

from fastapi import APIRouter, Depends

from es_sched.api.auth import Principal, require
from es_sched.api.errors import ApiError
from es_sched.api.fleet import (
    Fleet,
    lift,
    lift_version,
    read_fleet,
    revert_rollout,
    start_rollout,
)
from es_sched.api.native.models import (
    BlacklistInfo,
    Lift,
    RolloutInfo,
    RolloutStart,
    Seen,
    VersionRuleInfo,
    VersionStopInfo,
    WorkerInfo,
    Workers,
)
from es_sched.api.services import Services, services
from es_sched.blacklist import Blacklisting
from es_sched.kafka.topics import topics_for
from es_sched.serialization import wire
from es_sched.versions import Rollout, Stop
from es_sched.versions import Seen as SeenFigures

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
    v = fleet.versions
    return Workers(
        workers=workers,
        rollouts=[rollout_info(r) for _, r in sorted(v.rollouts.items())],
        versionStops=[stop_info(x) for _, x in sorted(v.stops.items())],
        versionRules=[
            VersionRuleInfo(taskType=t, maxFailureRate=r.max_failure_rate, minSamples=r.min_samples)
            for t, r in sorted(v.rules.items())
        ],
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


@router.post("/workers/rollouts", response_model=RolloutInfo)
def post_rollout(body: RolloutStart, svc: Services = SVC, who: Principal = OPERATOR) -> RolloutInfo:
    """Start (or restart) a gradual rollout: ``candidate`` gets ``share`` of the type's tasks
    until its failure rate against ``current`` promotes or stops it."""
    try:
        r = Rollout(
            body.taskType,
            body.candidate,
            body.current,
            body.share,
            body.margin,
            body.minSamples,
            "rolling",
            datetime.now(UTC),
            who.name,
        )
    except ValueError as exc:
        raise ApiError(400, str(exc)) from None
    return rollout_info(start_rollout(svc, r))


@router.post("/workers/rollouts/{task_type}/revert", response_model=RolloutInfo)
def post_revert(task_type: str, svc: Services = SVC, who: Principal = OPERATOR) -> RolloutInfo:
    """Undo a rollout's promotion or stop: rolling again at its share; 404 without a rollout,
    409 while it is still rolling."""
    found = read_fleet(svc).versions.rollouts.get(task_type)
    if found is None:
        raise ApiError(404, f"no rollout for {task_type}")
    if found.state == "rolling":
        raise ApiError(409, f"the rollout of {found.candidate} for {task_type} is not decided yet")
    return rollout_info(revert_rollout(svc, found, who.name))


@router.post("/workers/version-stops/{task_type}/{version}/lift", response_model=VersionStopInfo)
def post_lift_version(
    task_type: str, version: str, svc: Services = SVC, who: Principal = OPERATOR
) -> VersionStopInfo:
    """Lift a version's stop for a task type; 404 when none is in force."""
    found = read_fleet(svc).versions.stops.get((task_type, version))
    if found is None or not found.in_force:
        raise ApiError(404, f"version {version} is not stopped for {task_type}")
    return stop_info(lift_version(svc, found, who.name))


def _seen(s: SeenFigures | None) -> Seen | None:
    if s is None:
        return None
    return Seen(
        failureRate=s.failure_rate, outcomes=s.outcomes, failures=s.failures, windowEnd=s.window_end
    )


def rollout_info(r: Rollout) -> RolloutInfo:
    return RolloutInfo(
        taskType=r.task_type,
        candidate=r.candidate,
        current=r.current,
        state=r.state,
        share=r.share,
        given=r.given,
        margin=r.margin,
        minSamples=r.min_samples,
        at=r.at,
        by=r.by,
        why=r.why,
        seenCandidate=_seen(r.seen_candidate),
        seenCurrent=_seen(r.seen_current),
        reverted=r.reverted or None,
    )


def stop_info(x: Stop) -> VersionStopInfo:
    return VersionStopInfo(
        taskType=x.task_type,
        version=x.version,
        state=x.state,
        at=x.at,
        by=x.by,
        why=x.why,
        seen=_seen(x.seen),
        maxFailureRate=x.max_failure_rate,
    )


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
        versionStopped=dict(fleet.versions.held_types(s.types, s.version)),
    )
