"""The fleet as the read side tells it: each worker's latest status, the config records that
bear on placement (bans, pools, blacklistings), and why a queue has no eligible worker.

Built on each call from the fleet the API keeps in the background (``api.readers.WorkerBoard``,
ADR 57: the worker-status and config topics, never read on a request's thread); a lift's answer
waits for a read of the board begun after the lift was acknowledged, so the next read sees it
(ADR 56). Health is
``es_sched.liveness``'s rule on the last heartbeat, blacklistings are the dispatchers' own
records (``blacklist:<worker>`` on the config topic, ADR 58), and ``why_unplaceable`` asks
``es_sched.blacklist.unplaceable``, the rule the dispatcher's ``es_sched_queue_unplaceable``
metric uses. ``lift`` writes an operator's lift.

Worker versions (ADR 70, ``es_sched.versions``): ``versions`` holds the ``version-rule``,
``version-stop`` and ``rollout`` records; a worker whose version may take none of a type's
tasks is a ``version_stopped`` cause in ``why_unplaceable``. ``start_rollout``,
``revert_rollout`` and ``lift_version`` write an operator's records and answer, like a lift,
once the kept fleet shows them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime

from es_sched.api.readers import worker_board
from es_sched.api.services import Services
from es_sched.blacklist import Blacklisting, Candidate, Lifted, of_record, unplaceable
from es_sched.errors import SchemaError
from es_sched.kafka import config_client
from es_sched.liveness import Liveness, heard_at
from es_sched.serialization import config as config_records
from es_sched.serialization import wire
from es_sched.versions import Rollout, Stop, Versions, subject, versions_of

BLACKLIST = "blacklist:"


@dataclass(frozen=True)
class Fleet:
    """One read of the worker board and the config topic, at ``now``."""

    now: datetime
    read_age_s: float  # how long before ``now`` the board was read
    statuses: dict[str, wire.WorkerStatus]
    read_up_to: dict[int, int]
    health: dict[str, str]
    banned_versions: frozenset[str]
    pools: dict[str, str]  # task type -> pool (``pool:<T>`` records; else "default")
    blacklist: dict[str, Blacklisting]  # in force now, by worker
    lifted: dict[str, Lifted]  # the last lift of a worker not blacklisted since
    versions: Versions  # rules, stops and rollouts by failure rate (ADR 70)

    def candidates(self) -> list[Candidate]:
        return [
            Candidate(
                worker_id,
                s.pool or "default",
                frozenset(s.types),
                self.health[worker_id],
                s.version in self.banned_versions,
                self.blacklist.get(worker_id),
                self.versions.held_types(s.types, s.version),
            )
            for worker_id, s in self.statuses.items()
        ]

    def why_unplaceable(self, task_type: str) -> tuple[str, str] | None:
        """(reason, sentence) when no worker of the type's pool can take it now, else None."""
        pool = self.pools.get(task_type, "default")
        return unplaceable(task_type, pool, self.candidates(), self.now)


def read_fleet(svc: Services, now: datetime | None = None, since: float | None = None) -> Fleet:
    """The fleet as last read; with ``since`` (monotonic), as read by a read begun after it."""
    now = now or datetime.now(UTC)
    kept = worker_board(svc).kept
    read = (
        kept.get()
        if since is None
        else kept.after(since, svc.settings.api.read_your_writes_timeout_s)
    )
    board, read_up_to, config = read.workers, read.read_up_to, read.config
    d = svc.settings.dispatch
    liveness = Liveness(d.suspect_after_s, d.dead_after_s)
    health = {worker_id: health_of(s, liveness, now) for worker_id, s in board.items()}
    blacklist: dict[str, Blacklisting] = {}
    lifted: dict[str, Lifted] = {}
    for key, value in config.items():
        if not key.startswith(BLACKLIST) or "unreadable" in value:
            continue
        found = of_record(key.removeprefix(BLACKLIST), value)
        if isinstance(found, Lifted):
            lifted[found.worker_id] = found
        elif found.active(now):
            blacklist[found.worker_id] = found
    return Fleet(
        now,
        read.age_s(),
        board,
        read_up_to,
        health,
        read.banned,
        {
            k.removeprefix("pool:"): str(v["pool"])
            for k, v in config.items()
            if k.startswith("pool:") and "pool" in v
        },
        blacklist,
        lifted,
        versions_of(config),
    )


def health_of(s: wire.WorkerStatus, liveness: Liveness, now: datetime) -> str:
    sent = wire.sent_time(s)
    # dead_after 0: a report is heard from when it was sent, not when we read it
    seen = heard_at(sent, now, 0.0) if sent is not None else None
    return liveness.health(seen, now) if seen is not None else "unknown"


def lift(svc: Services, worker_id: str, by: str, now: datetime | None = None) -> Lifted:
    """Write the lift of ``worker_id``'s blacklisting (every dispatcher applies it within a
    tick); ``SchemaError`` for a worker id the config topic cannot key."""
    done = Lifted(worker_id, now or datetime.now(UTC), by)
    key = config_records.key_for("blacklist", worker_id)
    if not worker_id:
        raise SchemaError("a worker id is needed")
    config_client.publish(svc.settings, key, done.as_record())
    read_fleet(svc, since=time.monotonic())  # the lift's answer waits until reads show it
    return done


def _write(svc: Services, kind: str, key_subject: str, record: dict[str, object]) -> None:
    config_client.publish(svc.settings, config_records.key_for(kind, key_subject), record)
    read_fleet(svc, since=time.monotonic())  # the answer waits until reads show it


def start_rollout(svc: Services, rollout: Rollout) -> Rollout:
    """Write a rollout (state rolling): the candidate gets its share from the next tick."""
    _write(svc, "rollout", rollout.task_type, rollout.as_record())
    return rollout


def revert_rollout(
    svc: Services, decided: Rollout, by: str, now: datetime | None = None
) -> Rollout:
    """Undo a rollout's promotion or stop: rolling again at its share, judged afresh."""
    back = decided.revert(now or datetime.now(UTC), by)
    _write(svc, "rollout", back.task_type, back.as_record())
    return back


def lift_version(svc: Services, stop: Stop, by: str, now: datetime | None = None) -> Stop:
    """Lift a version's stop for a task type; only a later failure-rate window stops it again."""
    lifted = stop.lifted(now or datetime.now(UTC), by)
    _write(svc, "version-stop", subject(stop.task_type, stop.version), lifted.as_record())
    return lifted
