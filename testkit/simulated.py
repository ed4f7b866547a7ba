"""A run on Kafka against ``es-sched defs simulate`` of the same script: the one place that says
when two histories are the same.

``Script``: worker outcomes in the simulator's script format (``ref``, optional ``attempt`` and
``in_subworkflow_of``, ``status``, ``output``, ``reason``; ``external`` entries are signals to
WAIT tasks, which the test sends). ``ScriptedWorker`` answers the ready queue on Kafka from the
union of the scripts of the cases that share one system with the simulator's own worker
(``simulate.scripted_answer``: lease, start, outcome, under the same worker id and lease
token; an unscripted task completes with an empty output). It
matches a ready record by ``(ref, attempt)`` alone (a ready record does not say which
sub-workflow it belongs to), so the cases' scripts must agree wherever they name the same pair:
``ScriptedWorker.add`` refuses a conflict.

``simulated`` runs the same definitions and script through ``es_sched.simulate.Simulation``, the
code behind ``defs simulate``, and returns every history of the run (root, sub-workflows,
started and failure workflows). ``family`` collects the same set from the events topic.
``normalised`` puts a family in the form both sides are compared in:

- each event as its wire encoding (``serialization.encode_event``), as the audit's I5 compares;
- ``event_id``, ``causation_id`` and ``occurred_at`` dropped: event ids are derived from the
  workflow id, causation ids are input ids (the simulator numbers its inputs, a client picks
  command ids, the decider derives child starts and timer fires from ids again), and times are
  the wall clock on one side and a virtual clock on the other; every other value that is a time
  (a WAIT's ``wait_until``, a timer's due time) becomes ``<time>`` for the same reason;
- every id either side drew (workflow ids, task ids, child workflow ids, command ids) becomes
  ``<id N>`` by order of first appearance, walking the root's history and then each workflow
  it started in the order it asked for them, so a reference between histories (a parent's
  ``child_workflow_id``, a ``subWorkflowId`` output, a lease token naming its task) must point
  at the same place on both sides. Ids inside longer strings (``lease-<task id>``) are
  replaced too.

Everything else (event types and order, seqs, task refs, types, statuses, inputs, outputs,
reasons, variables, definitions pinned at start) must be equal.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from es_sched import bootstrap
from es_sched.domain import commands as c
from es_sched.domain.events import Event, TaskScheduled, WorkflowStarted, WorkflowStartRequested
from es_sched.serialization import encode_event
from es_sched.simulate import Simulation, scripted_answer
from testkit.runtime import Env, Worker

Script = list[dict[str, Any]]
DROPPED = ("event_id", "causation_id", "occurred_at")
TIME = re.compile(r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}")


class ScriptedWorker(Worker):
    """Plays the dispatcher and every worker on Kafka, answering as the simulator's worker."""

    def __init__(self, env: Env) -> None:
        super().__init__(env)
        self.outcomes: dict[tuple[str, int], dict[str, Any]] = {}
        self.lock = threading.Lock()

    def add(self, script: Script) -> None:
        """Take a case's worker entries (its signals are the test's)."""
        with self.lock:
            for entry in script:
                if entry.get("external"):
                    continue
                key = (str(entry["ref"]), int(entry.get("attempt", 1)))
                have = self.outcomes.setdefault(key, entry)
                if _outcome(have) != _outcome(entry):
                    raise ValueError(f"two scripts answer {key} differently: {have} / {entry}")

    def answer(self, task: dict[str, Any]) -> list[c.Input]:
        with self.lock:
            entry = self.outcomes.get((task["ref"], task["attempt"]))
        rid = f"{task['task_id']}:{task['attempt']}"
        ids = iter(f"{kind}:{rid}" for kind in ("dispatch", "started", "report"))
        out = scripted_answer(
            entry, task["workflow_id"], task["task_id"], task["attempt"], ids.__next__
        )
        self.executions.append((task["task_id"], task["attempt"], _outcome(entry or {})[0]))
        return out


def _outcome(entry: Mapping[str, Any]) -> tuple[str, dict[str, Any], Any]:
    status = str(entry.get("status", "COMPLETED")).upper()
    return status, dict(entry.get("output") or {}), entry.get("reason")


def _started(history: Sequence[Event]) -> list[str]:
    """The workflows ``history`` asked to start, in order."""
    return [
        e.payload.child_workflow_id
        for e in history
        if isinstance(e.payload, WorkflowStartRequested)
    ]


def family(by_wf: Mapping[str, list[Event]], root: str) -> list[list[Event]]:
    """``root``'s history, then every workflow it (or one it started) asked to start, depth
    first in the order asked; one that has no history yet is left out."""
    out: list[list[Event]] = []
    pending = [root]
    while pending:
        wf = pending.pop(0)
        history = by_wf.get(wf)
        if history:
            out.append(history)
            pending = _started(history) + pending
    return out


def simulated(
    definitions: Sequence[Mapping[str, Any]],
    taskdefs: Sequence[Mapping[str, Any]],
    script: Script,
    workflow_input: Mapping[str, Any],
) -> list[list[Event]]:
    """``defs simulate`` of the first definition with ``script``: its family of histories."""
    sim = Simulation(definitions, taskdefs, script, scripts=bootstrap.script_engine())
    result = sim.run(definitions[0], workflow_input)
    return family({wf: run.events for wf, run in sim.workflows.items()}, result["workflowId"])


def _ids(histories: Sequence[Sequence[Event]]) -> list[str]:
    seen: dict[str | None, None] = {}
    for history in histories:
        for e in history:
            seen.setdefault(e.workflow_id)
            p = e.payload
            if isinstance(p, WorkflowStarted):
                seen.setdefault(p.command_id)
            elif isinstance(p, TaskScheduled):
                seen.setdefault(p.task_id)
            elif isinstance(p, WorkflowStartRequested):
                seen.setdefault(p.child_workflow_id)
    return [i for i in seen if i]  # a start's command id may be absent


def normalised(histories: Sequence[Sequence[Event]]) -> list[list[dict[str, Any]]]:
    """``histories`` (a ``family``) in the form compared: see the module docstring."""
    ids = _ids(histories)
    names = {old: f"<id {n}>" for n, old in enumerate(ids, 1)}
    # Longest first: a simulator id ``task-1`` is a prefix of ``task-12``.
    pattern = re.compile("|".join(re.escape(i) for i in sorted(ids, key=len, reverse=True)))

    def norm(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: norm(v) for k, v in value.items() if k not in DROPPED}
        if isinstance(value, list):
            return [norm(v) for v in value]
        if isinstance(value, str):
            if TIME.match(value):
                return "<time>"
            return pattern.sub(lambda m: names[m.group(0)], value) if ids else value
        return value

    return [[norm(json.loads(encode_event(e))) for e in history] for history in histories]


def first_difference(kafka: Any, sim: Any, path: str = "") -> str | None:
    """Where two normalised families first differ, said for a failing test."""
    if isinstance(kafka, dict) and isinstance(sim, dict):
        for k in sorted(set(kafka) | set(sim)):
            found = first_difference(kafka.get(k), sim.get(k), f"{path}.{k}")
            if found:
                return found
        return None
    if isinstance(kafka, list) and isinstance(sim, list):
        for i, (a, b) in enumerate(zip(kafka, sim, strict=False)):
            found = first_difference(a, b, f"{path}[{i}]")
            if found:
                return found
        if len(kafka) != len(sim):
            longer, side = (kafka, "Kafka") if len(kafka) > len(sim) else (sim, "simulate")
            extra = longer[min(len(kafka), len(sim))]
            what = extra.get("type") if isinstance(extra, dict) else extra
            return f"{path}: {side} has {len(longer) - min(len(kafka), len(sim))} more, from {what}"
        return None
    return None if kafka == sim else f"{path}: Kafka {kafka!r:.300}, simulate {sim!r:.300}"


def assert_same(kafka: Sequence[Sequence[Event]], sim: Sequence[Sequence[Event]]) -> None:
    """The two families are equal once normalised; else the first difference, with the types
    of each history on both sides."""
    a, b = normalised(kafka), normalised(sim)
    diff = first_difference(a, b)
    if diff is not None:
        shape = "\n".join(
            f"  {side} #{i}: {[e['type'] for e in h]}"
            for side, fam in (("Kafka", a), ("simulate", b))
            for i, h in enumerate(fam)
        )
        raise AssertionError(f"history differs from defs simulate at {diff}\n{shape}")
