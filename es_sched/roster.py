"""The roster: which role processes of a deployment are alive, where, and how far behind (ADR 61).

Every role process (decider, timers, retry relay, dispatcher, projectors, API, workers)
publishes a ``Presence`` every ``ES_SCHED_SYSTEM_LIVENESS_INTERVAL_S`` on the compacted
``<prefix>.system`` topic, keyed ``<role>/<instance>``, and a ``stopped`` one on a clean exit.
This module holds the record and the rules read from it; its bytes are
``serialization.records`` (``schemas/records/liveness.v1.json``), the Kafka side is
``es_sched.kafka.roster``.

- ``health(p, now, stale_after_s)``: ``alive`` while renewed within ``stale_after_s``
  (``ES_SCHED_SYSTEM_STALE_AFTER_INTERVALS`` intervals), ``stale`` after, ``stopped`` once it
  said so.
- ``claim(held, me, now, stale_after_s, holder_running, replace)``: whether a process may take
  the instance id ``held`` is the record of. Free, stopped or its own: yes. ``--replace``: yes,
  on purpose. Held on this host: yes when the holder's pid is no longer running (a restart
  after a crash takes over at once), else no. Held on another host: yes when its record is
  stale (a host that crashed stops renewing it; this host cannot look at that pid), else no.
  A refusal names the holder's host and pid.
- ``foreign(records, deployment, now, stale_after_s)``: the live processes of another
  deployment on the same topic prefix (ADR 63): a process refuses to start beside them.
- ``taken_over(mine, held)``: a process started later holds this process's key: it stops.
- ``forgotten(records, host, running)``: the records of processes of this host that died
  holding no instance, which the next process to start here removes.
- ``orphaned(records, role, mine, taken, members)``: the processes a successor ends the open
  transaction of (ADR 79), named by the partitions it was just given.
- ``same_deployment(theirs, ours)``: the check of an assignment by a worker, and of a worker's
  status by a dispatcher (ADR 63).

Pure: the standard library only, and no clock (``now`` is passed in).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Literal

Health = Literal["alive", "stale", "stopped"]
State = Literal["running", "stopped"]
# Roles whose instance id names something only one process may hold: a static group member
# (decider, timers, retry relay, dispatcher: ADR 21, ADR 79) and, but for the dispatcher, a
# transactional id. The projectors and API share their work among any number of processes
# (dynamic group members), so their records are keyed by what is theirs alone (the instance
# with the host and pid; a worker's id), written as a tombstone on a clean exit, and forgotten
# once their pid is gone (``forgotten``).
CLAIMED_ROLES = frozenset({"decider", "timers", "retry", "dispatcher"})


@dataclass(frozen=True)
class Presence:
    """One role process as it last said: who, where, since when, holding what, how far behind."""

    deployment: str
    role: str
    instance: str
    host: str
    pid: int
    version: str
    started_at: datetime
    seen_at: datetime
    partitions: tuple[str, ...] = ()  # "topic[p]" of the partitions its consumer holds
    lag: int | None = None  # records its consumer has not read yet; None: not a consumer
    state: State = "running"

    @property
    def key(self) -> str:
        return key_of(self.role, self.instance)

    @property
    def claims(self) -> bool:
        """Whether its instance is one only one process may hold (``CLAIMED_ROLES``)."""
        return self.role in CLAIMED_ROLES

    @property
    def where(self) -> str:
        return f"pid {self.pid} on host {self.host}"

    def renewed(self, now: datetime, partitions: Iterable[str], lag: int | None) -> Presence:
        return replace(self, seen_at=now, partitions=tuple(sorted(partitions)), lag=lag)

    def stopped(self, now: datetime) -> Presence:
        return replace(self, seen_at=now, state="stopped", partitions=(), lag=None)


def key_of(role: str, instance: str) -> str:
    return f"{role}/{instance}"


def health(p: Presence, now: datetime, stale_after_s: float) -> Health:
    if p.state == "stopped":
        return "stopped"
    return "alive" if now - p.seen_at <= timedelta(seconds=stale_after_s) else "stale"


@dataclass(frozen=True)
class Claim:
    take: bool
    reason: str


def claim(
    held: Presence | None,
    host: str,
    pid: int,
    now: datetime,
    stale_after_s: float,
    holder_running: bool,
    replace_holder: bool = False,
) -> Claim:
    """May the process ``pid`` on ``host`` take the instance ``held`` is the record of?
    ``holder_running``: whether ``held.pid`` runs on this host (asked only when it is this
    host; pass False otherwise)."""
    if held is None or held.state == "stopped":
        return Claim(True, "free")
    if held.host == host and held.pid == pid:
        return Claim(True, "already ours")
    if replace_holder:
        return Claim(True, f"taken over on purpose (--replace) from {held.where}")
    if held.host == host:
        if holder_running:
            return Claim(False, _refusal(held, now, "it is still running"))
        return Claim(True, f"its holder ({held.where}) is no longer running")
    if health(held, now, stale_after_s) == "stale":
        silent = (now - held.seen_at).total_seconds()
        return Claim(True, f"its holder ({held.where}) has been silent for {silent:.0f}s")
    return Claim(False, _refusal(held, now, "its record is being renewed"))


def _refusal(held: Presence, now: datetime, why: str) -> str:
    ago = max(0.0, (now - held.seen_at).total_seconds())
    return (
        f"{held.role} instance {held.instance!r} is held by {held.where} (deployment "
        f"{held.deployment}, last seen {ago:.0f}s ago; {why}): stop that process, give this "
        "one another ES_SCHED_RUN_INSTANCE, or start it with --replace to take the instance over"
    )


def foreign(
    records: Iterable[Presence], deployment: str, now: datetime, stale_after_s: float
) -> list[Presence]:
    """The live processes of another deployment among ``records``."""
    return [
        p
        for p in records
        if p.deployment != deployment and health(p, now, stale_after_s) == "alive"
    ]


def taken_over(mine: Presence, held: Presence | None) -> bool:
    """Whether ``held``, the newest record of ``mine``'s key, says a process started later took
    the key over (``--replace``, or a takeover after ``mine`` went stale): newest start wins,
    the older process stops."""
    return (
        held is not None
        and held.state == "running"
        and (held.host, held.pid) != (mine.host, mine.pid)
        and held.started_at > mine.started_at
    )


def orphaned(
    records: Iterable[Presence],
    role: str,
    mine: str,
    taken: Iterable[str],
    members: Iterable[str],
) -> list[Presence]:
    """The processes of ``role`` whose open transaction may hold partitions just given to
    instance ``mine`` (ADR 79): running by their last record, which listed one of ``taken``
    ("topic[p]"), and no longer members of the group (``members``: the instances it holds
    now). A process the group dropped without its saying so (killed, paused, cut off) may
    have left a transaction open on them, and its successor reads nothing of theirs until the
    transaction coordinator aborts it (KIP-447). Another member still in the group was handed
    its partitions' work over in the rebalance: never one of these."""
    taken, members = set(taken), set(members)
    return [
        p
        for p in records
        if p.role == role
        and p.instance != mine
        and p.state == "running"
        and p.instance not in members
        and taken & set(p.partitions)
    ]


def forgotten(
    records: Iterable[Presence], host: str, running: Callable[[int], bool]
) -> list[Presence]:
    """The records a process starting on ``host`` removes: those of unclaimed roles (keyed by
    their process) on this host whose pid no longer runs. A crashed API process,
    projector or worker leaves a stale record until then; another host's, until a process
    starts there."""
    return [
        p for p in records if p.role not in CLAIMED_ROLES and p.host == host and not running(p.pid)
    ]


def same_deployment(theirs: str, ours: str) -> bool:
    """Whether a record stamped ``theirs`` (an assignment, a worker's status) belongs to
    deployment ``ours`` (ADR 63); one without a stamp (written before it existed) counts as
    ours."""
    return not theirs or theirs == ours


@dataclass
class Roster:
    """The newest record of each key, as read from ``<prefix>.system`` (a tombstone removes)."""

    records: dict[str, Presence] = field(default_factory=dict)

    def apply(self, key: str, p: Presence | None) -> None:
        if p is None:
            self.records.pop(key, None)
        else:
            self.records[key] = p

    def get(self, key: str) -> Presence | None:
        return self.records.get(key)
