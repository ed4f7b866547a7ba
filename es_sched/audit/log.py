"""What the checker reads and what it finds: records with their place in the log, violations.

A ``Log`` is the events topic (``events``, in offset order per partition), the decider's
input topics (``inputs``: commands and task-results, ``read_committed``, in offset order per
partition) and the blacklistings on the config topic (``blacklistings``). Every violation
names its invariant, its workflow (or worker) and the offsets it is about, so an operator can
read the records it points at.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from es_sched.blacklist import Blacklisting
from es_sched.domain import commands as c
from es_sched.domain.events import Event
from es_sched.domain.intake import input_refusal
from es_sched.domain.state import WorkflowState


@dataclass(frozen=True, order=True)
class At:
    """Where a record sits."""

    topic: str
    partition: int
    offset: int

    def __str__(self) -> str:
        return f"{self.topic}[{self.partition}]@{self.offset}"


@dataclass(frozen=True)
class LoggedEvent:
    event: Event
    at: At


@dataclass(frozen=True)
class LoggedInput:
    """An input the decider read. ``inp`` is None for a record refused before it decodes
    (empty, over the command cap, not an input). Whether a decoded one is accepted is
    ``domain.intake``'s rule, the decider's own: a refused input is dead-lettered, never
    answered by an event, so no invariant expects an answer to it."""

    inp: c.Input | None
    at: At
    key: str = ""

    @property
    def accepted(self) -> bool:
        return self.inp is not None and input_refusal(self.key, self.inp) is None


@dataclass(frozen=True)
class LoggedBlacklisting:
    """A ``blacklist:<worker>`` record of the config topic (ADR 58): the dispatcher's decision
    and the failures it cites, each of which the log must hold as the worker's own fault."""

    blacklisting: Blacklisting
    at: At


@dataclass
class Log:
    events: list[LoggedEvent] = field(default_factory=list)
    inputs: list[LoggedInput] = field(default_factory=list)
    blacklistings: list[LoggedBlacklisting] = field(default_factory=list)

    def accepted(self) -> list[LoggedInput]:
        """The inputs the decider decides (``domain.intake``); the rest it dead-letters."""
        return [i for i in self.inputs if i.accepted]


@dataclass(frozen=True)
class Violation:
    invariant: str  # "I1" .. "I6"
    workflow_id: str
    at: tuple[At, ...]
    message: str

    def line(self) -> str:
        where = ", ".join(map(str, self.at)) or "-"
        return f"{self.invariant} {self.workflow_id} {where}: {self.message}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "invariant": self.invariant,
            "workflow_id": self.workflow_id,
            "offsets": [str(a) for a in self.at],
            "message": self.message,
        }


@dataclass
class Report:
    """What a check found: violations (exit 1) and information (open workflows when the
    system is not declared idle, inputs the checks could not use)."""

    violations: list[Violation] = field(default_factory=list)
    info: list[Violation] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    states: dict[str, WorkflowState] = field(default_factory=dict)  # the fold, for I4

    @property
    def ok(self) -> bool:
        return not self.violations

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "counts": self.counts,
            "violations": [v.as_dict() for v in self.violations],
            "info": [v.as_dict() for v in self.info],
        }
