"""Which worker versions may take a task type's tasks: rules by failure rate, and rollouts.

Pure functions and values, no I/O, no clock (ADR 70), beside ``es_sched.blacklist`` (ADR 58),
whose shape this follows: a decision is a record on the compacted config topic, written by one
dispatcher, applied by every dispatcher and shown by the API, the console and the CLI; an
operator undoes it with another record on the same key.

The figures are the analytics role's ``FailureRate`` proposals of kind ``version`` (the stats
topic, ``es_sched.domain.learned``): a version's failures of its outcomes for one task type over
the role's last window. They are advice; what a decision used is copied into its record, so a
later proposal, or a lost one, changes no decision already made.

- ``Rule`` (``version-rule:<T>``, ``T`` or ``*`` for every type): a version whose failure rate
  for T is over ``max_failure_rate`` over at least ``min_samples`` outcomes is stopped for T.
- ``Stop`` (``version-stop:<T>|<V>``): version V gets no task of type T, with the figures that
  stopped it; ``state: lifted`` is an operator's lift, after which only a window that ends later
  can stop V again.
- ``Rollout`` (``rollout:<T>``): candidate version C receives ``share`` of T's tasks (chosen by
  task id, ``routes_to_candidate``, so every dispatcher and every retry of a decision agree), the
  rest go to the other versions. Once C and the current version each have ``min_samples``
  outcomes in windows that end after the rollout began, C is **stopped** when its failure rate
  is over the current one's plus ``margin`` (C then gets nothing), else **promoted** (share 1:
  C takes every task of T and is the current version). An operator's revert puts a decided
  rollout back to ``rolling`` at its share; only windows ending after the revert judge it.
- ``Versions``: what one dispatcher holds of these records; ``admits`` is the placement rule,
  ``why_not`` the words for a version that may take none of a type's tasks (the queues page,
  ``es_sched_queue_unplaceable{reason="version_stopped"}``), ``decide`` the judging.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Literal

from es_sched.domain.learned import FailureRate

ANY_TYPE = "*"
RolloutState = Literal["rolling", "promoted", "stopped"]
ROLLOUT_STATES: tuple[RolloutState, ...] = ("rolling", "promoted", "stopped")
KINDS = ("version-rule", "version-stop", "rollout")  # the config records this module reads
_SCALE = float(2**64)


def routes_to_candidate(task_id: str, share: float) -> bool:
    """Whether a rollout at ``share`` gives this task to the candidate version: a stable hash
    of the task id, so the answer is the same in every dispatcher, after a restart and for a
    task handed back and placed again."""
    if share <= 0:
        return False
    if share >= 1:
        return True
    digest = hashlib.sha256(task_id.encode()).digest()
    return int.from_bytes(digest[:8], "big") / _SCALE < share


def subject(task_type: str, version: str) -> str:
    """The config subject of a version stop: ``<task type>|<version>``."""
    return f"{task_type}|{version}"


def split_subject(value: str) -> tuple[str, str]:
    task_type, sep, version = value.rpartition("|")
    if not sep or not task_type or not version:
        raise ValueError(f"a version stop's subject is <task type>|<version>, not {value!r}")
    return task_type, version


def _time(value: str) -> datetime | None:
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None


def _newer(window_end: str, than: datetime) -> bool:
    """A proposal's window ends after ``than`` (an unreadable end is never newer)."""
    end = _time(window_end)
    if end is None:
        return False
    if (end.tzinfo is None) != (than.tzinfo is None):
        return False
    return end > than


def _well_formed(rate: FailureRate) -> bool:
    """A proposal whose figures make sense (types are checked where it is read,
    ``domain.learned.parse``); advice that does not is ignored, never fatal."""
    return 0 <= rate.failures <= rate.outcomes and 0.0 <= rate.failure_rate <= 1.0


@dataclass(frozen=True)
class Seen:
    """The figures a decision used, as the proposal said them."""

    failure_rate: float
    outcomes: int
    failures: int
    window_end: str

    @classmethod
    def of(cls, rate: FailureRate) -> Seen:
        return cls(rate.failure_rate, rate.outcomes, rate.failures, rate.window_end)

    @property
    def why(self) -> str:
        return f"{self.failures} of {self.outcomes} failed ({self.failure_rate:.0%})"

    def as_record(self) -> dict[str, Any]:
        return {
            "failure_rate": self.failure_rate,
            "outcomes": self.outcomes,
            "failures": self.failures,
            "window_end": self.window_end,
        }


def _seen_of(value: Mapping[str, Any] | None) -> Seen | None:
    if not value:
        return None
    return Seen(
        float(value["failure_rate"]),
        int(value["outcomes"]),
        int(value["failures"]),
        str(value["window_end"]),
    )


@dataclass(frozen=True)
class Rule:
    """Stop a version for ``task_type`` (``*``: any) when it fails too often."""

    task_type: str
    max_failure_rate: float
    min_samples: int

    def breached(self, rate: FailureRate) -> bool:
        return rate.outcomes >= self.min_samples and rate.failure_rate > self.max_failure_rate

    def as_record(self) -> dict[str, Any]:
        return {"max_failure_rate": self.max_failure_rate, "min_samples": self.min_samples}


def rule_of_record(task_type: str, value: Mapping[str, Any]) -> Rule:
    return Rule(task_type, float(value["max_failure_rate"]), int(value["min_samples"]))


@dataclass(frozen=True)
class Stop:
    """Version ``version`` gets no task of ``task_type`` (state ``stopped``), or no longer
    (``lifted`` by an operator)."""

    task_type: str
    version: str
    state: Literal["stopped", "lifted"]
    at: datetime
    by: str
    seen: Seen | None = None
    max_failure_rate: float | None = None

    @property
    def in_force(self) -> bool:
        return self.state == "stopped"

    @property
    def why(self) -> str:
        if self.seen is None:
            return f"stopped by {self.by}"
        return f"{self.seen.why}, over {self.max_failure_rate:.0%}"

    def lifted(self, now: datetime, by: str) -> Stop:
        return Stop(self.task_type, self.version, "lifted", now, by)

    def as_record(self) -> dict[str, Any]:
        out: dict[str, Any] = {"state": self.state, "at": self.at.isoformat(), "by": self.by}
        if self.seen is not None:
            out["seen"] = self.seen.as_record()
        if self.max_failure_rate is not None:
            out["max_failure_rate"] = self.max_failure_rate
        return out


def stop_of_record(key_subject: str, value: Mapping[str, Any]) -> Stop:
    task_type, version = split_subject(key_subject)
    limit = value.get("max_failure_rate")
    return Stop(
        task_type,
        version,
        "lifted" if value["state"] == "lifted" else "stopped",
        datetime.fromisoformat(value["at"]),
        str(value.get("by", "")),
        _seen_of(value.get("seen")),
        None if limit is None else float(limit),
    )


@dataclass(frozen=True)
class Rollout:
    """A gradual rollout of ``candidate`` for ``task_type`` against ``current``."""

    task_type: str
    candidate: str
    current: str
    share: float  # of the type's tasks the candidate receives while rolling
    margin: float  # how much worse than current the candidate may fail and still be promoted
    min_samples: int  # outcomes each version needs before a decision
    state: RolloutState
    at: datetime  # when this state began; only windows ending later judge a rolling rollout
    by: str  # the operator who started or reverted it, or the dispatcher that decided
    seen_candidate: Seen | None = None
    seen_current: Seen | None = None
    reverted: str = ""  # the state an operator's revert undid

    def __post_init__(self) -> None:
        if not 0 < self.share <= 1:
            raise ValueError(f"a rollout's share is in (0, 1], not {self.share}")
        if self.candidate == self.current:
            raise ValueError("a rollout's candidate and current versions differ")

    @property
    def given(self) -> float:
        """The share the candidate receives now."""
        return {"rolling": self.share, "promoted": 1.0, "stopped": 0.0}[self.state]

    @property
    def why(self) -> str:
        if self.seen_candidate is None or self.seen_current is None:
            return f"{self.state} by {self.by}"
        return (
            f"{self.candidate}: {self.seen_candidate.why} against {self.current}: "
            f"{self.seen_current.why}, margin {self.margin:.0%}"
        )

    def admits(self, version: str, task_id: str) -> bool:
        if self.state == "promoted":
            return version == self.candidate
        if self.state == "stopped":
            return version != self.candidate
        to_candidate = routes_to_candidate(task_id, self.share)
        return (version == self.candidate) == to_candidate

    def judge(
        self, candidate: FailureRate | None, current: FailureRate | None, now: datetime, by: str
    ) -> Rollout | None:
        """Promoted or stopped once both versions have enough fresh outcomes; else None."""
        if self.state != "rolling" or candidate is None or current is None:
            return None
        for rate in (candidate, current):
            if rate.outcomes < self.min_samples or not _newer(rate.window_end, self.at):
                return None
        worse = candidate.failure_rate > current.failure_rate + self.margin
        return replace(
            self,
            state="stopped" if worse else "promoted",
            at=now,
            by=by,
            seen_candidate=Seen.of(candidate),
            seen_current=Seen.of(current),
            reverted="",
        )

    def revert(self, now: datetime, by: str) -> Rollout:
        """An operator undoes a promotion or a stop: rolling again at its share."""
        if self.state == "rolling":
            raise ValueError(f"the rollout of {self.task_type} is not decided yet")
        return replace(
            self,
            state="rolling",
            at=now,
            by=by,
            seen_candidate=None,
            seen_current=None,
            reverted=self.state,
        )

    def as_record(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "state": self.state,
            "candidate": self.candidate,
            "current": self.current,
            "share": self.share,
            "given": self.given,
            "margin": self.margin,
            "min_samples": self.min_samples,
            "at": self.at.isoformat(),
            "by": self.by,
        }
        if self.seen_candidate is not None and self.seen_current is not None:
            out["seen"] = {
                "candidate": self.seen_candidate.as_record(),
                "current": self.seen_current.as_record(),
            }
        if self.reverted:
            out["reverted"] = self.reverted
        return out


def rollout_of_record(task_type: str, value: Mapping[str, Any]) -> Rollout:
    seen = value.get("seen") or {}
    state = value["state"]
    if state not in ROLLOUT_STATES:
        raise ValueError(f"unknown rollout state {state!r}")
    return Rollout(
        task_type,
        str(value["candidate"]),
        str(value["current"]),
        float(value["share"]),
        float(value.get("margin", 0.0)),
        int(value.get("min_samples", 1)),
        state,
        datetime.fromisoformat(value["at"]),
        str(value.get("by", "")),
        _seen_of(seen.get("candidate")),
        _seen_of(seen.get("current")),
        str(value.get("reverted", "")),
    )


Decision = Stop | Rollout


@dataclass
class Versions:
    """The config topic's rules, stops and rollouts, as one dispatcher (or the API) holds them."""

    rules: dict[str, Rule] = field(default_factory=dict)  # task type or ``*``
    stops: dict[tuple[str, str], Stop] = field(default_factory=dict)  # (type, version)
    rollouts: dict[str, Rollout] = field(default_factory=dict)  # task type

    def admits(self, task_type: str, version: str, task_id: str) -> bool:
        """May a worker of ``version`` take this task of ``task_type``?"""
        stop = self.stops.get((task_type, version))
        if stop is not None and stop.in_force:
            return False
        rollout = self.rollouts.get(task_type)
        return rollout is None or rollout.admits(version, task_id)

    def why_not(self, task_type: str, version: str) -> str | None:
        """Why ``version`` may take none of ``task_type``'s tasks now; None if it may take some."""
        stop = self.stops.get((task_type, version))
        if stop is not None and stop.in_force:
            return f"version {version} stopped for {task_type}: {stop.why}"
        r = self.rollouts.get(task_type)
        if r is not None and r.state == "stopped" and version == r.candidate:
            return f"rollout of {version} stopped: {r.why}"
        if r is not None and r.state == "promoted" and version != r.candidate:
            return f"version {version} replaced by {r.candidate}"
        return None

    def held_types(self, types: Iterable[str], version: str) -> tuple[tuple[str, str], ...]:
        """(task type, why) for each of ``types`` that ``version`` may take none of."""
        out = ((t, self.why_not(t, version)) for t in sorted(types))
        return tuple((t, why) for t, why in out if why is not None)

    def configure(self, kind: str, key_subject: str, value: Mapping[str, Any] | None) -> None:
        """One config record of a ``version-rule``, ``version-stop`` or ``rollout`` key,
        checked against its schema already (None: its tombstone)."""
        if kind == "version-rule":
            if value is None:
                self.rules.pop(key_subject, None)
            else:
                self.rules[key_subject] = rule_of_record(key_subject, value)
        elif kind == "version-stop":
            if value is None:
                self.stops.pop(split_subject(key_subject), None)
            else:
                self.apply(stop_of_record(key_subject, value))
        elif kind == "rollout":
            if value is None:
                self.rollouts.pop(key_subject, None)
            else:
                self.apply(rollout_of_record(key_subject, value))
        else:
            raise ValueError(f"not a version record: {kind}")

    def apply(self, decision: Decision) -> None:
        if isinstance(decision, Stop):
            self.stops[(decision.task_type, decision.version)] = decision
        else:
            self.rollouts[decision.task_type] = decision

    def decide(self, proposals: Iterable[FailureRate], now: datetime, by: str) -> list[Decision]:
        """What the latest ``version`` proposals decide against the records held: new stops
        by the rules, and promoted or stopped rollouts. Deciding again on the same figures
        decides nothing (a stop in force, a decided rollout, a lift newer than the window)."""
        latest: dict[tuple[str, str], FailureRate] = {}
        for p in proposals:
            if p.kind == "version" and _well_formed(p):
                latest[(p.task_type, p.subject)] = p
        out: list[Decision] = []
        for (task_type, version), rate in sorted(latest.items()):
            rule = self.rules.get(task_type) or self.rules.get(ANY_TYPE)
            if rule is None or not rule.breached(rate):
                continue
            held = self.stops.get((task_type, version))
            if held is not None and (held.in_force or not _newer(rate.window_end, held.at)):
                continue
            out.append(
                Stop(task_type, version, "stopped", now, by, Seen.of(rate), rule.max_failure_rate)
            )
        for task_type, rollout in sorted(self.rollouts.items()):
            decided = rollout.judge(
                latest.get((task_type, rollout.candidate)),
                latest.get((task_type, rollout.current)),
                now,
                by,
            )
            if decided is not None:
                out.append(decided)
        return out


def versions_of(config: Mapping[str, Mapping[str, Any]]) -> Versions:
    """The version records of a folded config topic (key -> value; a value the reader could
    not read is marked ``unreadable`` and left out), as the API and the CLI show them."""
    found = Versions()
    for key, value in config.items():
        kind = next((k for k in KINDS if key.startswith(k + ":")), None)
        if kind is None or "unreadable" in value:
            continue
        found.configure(kind, key[len(kind) + 1 :], value)
    return found
