"""The hostile input campaign on a running system (ADR 75): send ``testkit.hostile``'s inputs
through Kafka and the HTTP API and find, for each, how it was refused.

- ``HoldingWorker``: the test worker, but a task named ``held`` is only leased, never reported:
  its workflow is a ``Victim`` that forged reports aim at.
- ``produce``: the records, each remembered by the offset the broker gave it.
- ``outcomes``: each record's refusal as the log holds it: ``dead_letter`` (a dead letter whose
  ``origin.*`` headers name its offset, with its reason), or the refusal event its
  ``input_id`` caused (``workflow.rejected``, ``task.completion_rejected``, ``command.rejected``;
  or ``task.cancel_confirmed``, which records a worker's word and changes nothing); and every
  other event such an input caused (there must be none).
- ``send_http``: each request with the status and the reason the API gave.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx

from es_sched.api.conductor.tasks import INPUT_ID_HEADER
from es_sched.domain import commands as c
from es_sched.kafka.clients import producer
from es_sched.kafka.dead_letters import header_map
from testkit.hostile import COMMANDS, Hostile, Request, Victim
from testkit.kafka import read_to_end
from testkit.runtime import Env, Worker, read_events

REFUSALS = frozenset({"workflow.rejected", "task.completion_rejected", "command.rejected"})
# A worker's word that it stopped a task is recorded whatever lease it names and changes
# nothing (``commands.ReportCancelled``): a forged one is kept for the audit, not refused.
RECORDED_ONLY = "task.cancel_confirmed"
RECORDED = REFUSALS | {RECORDED_ONLY}
HELD = "held"  # the task type a HoldingWorker leases and never reports
Place = tuple[str, int, int]  # topic, partition, offset


class HoldingWorker(Worker):
    """Leases every task; reports all but ``held`` ones, which stay leased to it."""

    def __init__(self, env: Env) -> None:
        super().__init__(env)
        self.victims: dict[str, Victim] = {}

    def answer(self, task: dict[str, Any]) -> list[c.Input]:
        lease, *report = super().answer(task)
        if task["name"] != HELD:
            return [lease, *report]
        assert isinstance(lease, c.DispatchTask)
        self.executions.pop()  # leased only: nothing was executed
        self.victims[lease.workflow_id] = Victim(
            lease.workflow_id,
            lease.task_id,
            lease.attempt,
            lease.worker_id,
            lease.lease_epoch,
            lease.lease_token,
        )
        return [lease]


def produce(env: Env, hostile: list[Hostile]) -> dict[Place, Hostile]:
    """Each record to its input topic; where the broker put it."""
    placed: dict[Place, Hostile] = {}
    p = producer(env.kafka, None, **{"message.max.bytes": 4 * 1024 * 1024})
    for h in hostile:
        topic = env.topics.commands if h.topic == COMMANDS else env.topics.task_results

        def delivered(err: Any, msg: Any, h: Hostile = h) -> None:
            assert err is None, f"hostile record {h.n} not delivered: {err}"
            placed[(msg.topic(), msg.partition(), msg.offset())] = h

        p.produce(topic, key=h.key.encode(), value=h.value, on_delivery=delivered)
        p.poll(0)
    assert p.flush(120) == 0
    return placed


@dataclass
class Outcomes:
    """How the log answered the records ``produce`` placed."""

    refused: dict[int, str] = field(default_factory=dict)  # record n -> outcome
    reasons: dict[int, str] = field(default_factory=dict)  # record n -> the reason given
    moved: list[str] = field(default_factory=list)  # a non-refusal event a hostile one caused
    dead_ids: set[str] = field(default_factory=set)  # input ids of dead letters that have one
    dead_lettered_by_decider: int = 0

    def unanswered(self, hostile: list[Hostile]) -> list[str]:
        return [
            f"{h.n} {h.mutation} {h.itype} {h.value[:300]!r}"
            for h in hostile
            if h.n not in self.refused
        ]

    def counts(self, hostile: list[Hostile]) -> dict[str, dict[str, int]]:
        """mutation -> outcome -> how many (``unanswered`` for none yet)."""
        out: dict[str, Counter[str]] = {}
        for h in hostile:
            out.setdefault(h.mutation, Counter())[self.refused.get(h.n, "unanswered")] += 1
        return {m: dict(sorted(by.items())) for m, by in sorted(out.items())}


def outcomes(env: Env, placed: dict[Place, Hostile]) -> Outcomes:
    found = Outcomes()
    for msg in read_to_end(env.topics.dead_letters, bootstrap=env.bootstrap):
        h_ = header_map(msg)
        if h_.get("error.role") == "decider":
            found.dead_lettered_by_decider += 1
        found.dead_ids.add(_input_id(msg.value()))
        where = (h_.get("origin.topic", ""), int(h_.get("origin.partition", -1)))
        h = placed.get((*where, int(h_.get("origin.offset", -1))))
        if h is not None:
            found.refused[h.n] = "dead_letter"
            found.reasons[h.n] = h_.get("error.reason", "")
    by_id = {h.input_id: h for h in placed.values() if h.input_id is not None}
    for events in read_events(env).values():
        for e in events:
            h = by_id.get(e.causation_id)
            if h is None:
                continue
            if e.type in REFUSALS:
                found.refused.setdefault(h.n, e.type)
                found.reasons.setdefault(h.n, str(getattr(e.payload, "reason", "")))
            elif e.type == RECORDED_ONLY:
                found.refused.setdefault(h.n, e.type)
                found.reasons.setdefault(h.n, "recorded for the audit; changes nothing")
            else:
                found.moved.append(f"{e.type} of {e.workflow_id} caused by hostile input {h.n}")
    return found


def _input_id(value: bytes | None) -> str:
    try:
        doc = json.loads(value or b"")
    except (ValueError, RecursionError):  # not JSON, or nested too deep to be an input
        return ""
    return str(doc.get("input_id", "")) if isinstance(doc, dict) else ""


@dataclass(frozen=True)
class Answered:
    request: Request
    status: int
    reason: str
    input_id: str | None  # a claim the API sent for the record (a refused task update)
    took_s: float = 0.0


def send_http(http: httpx.Client, requests: list[Request]) -> list[Answered]:
    out = []
    for r in requests:
        started = time.monotonic()
        try:
            got = http.request(
                r.method, r.path, content=r.body, headers={"Content-Type": "application/json"}
            )
        except httpx.TransportError as exc:  # no answer at all: status 0, never a refusal
            out.append(Answered(r, 0, f"{type(exc).__name__}: {exc}", None))
            continue
        took = time.monotonic() - started
        out.append(
            Answered(r, got.status_code, _reason(got), got.headers.get(INPUT_ID_HEADER), took)
        )
    return out


def _reason(got: httpx.Response) -> str:
    """What the answer says was wrong: Conductor's ``message``, FastAPI's ``detail``, the
    token protocol's ``error``; else the text."""
    try:
        doc = got.json()
    except ValueError:
        return got.text
    if isinstance(doc, dict):
        for k in ("message", "detail", "error"):
            if doc.get(k):
                return json.dumps(doc[k])[:500] if not isinstance(doc[k], str) else doc[k]
    return got.text
