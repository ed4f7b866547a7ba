"""``es-sched defs simulate``: run definitions through the pure core with a scripted worker.

An in-memory runtime plays every other role: it dispatches worker tasks in the order they were
queued and answers each from the script (or completes it at once with an empty output),
starts and finishes sub-workflows, delivers ``external`` completions to WAIT tasks, and moves a
virtual clock to the next due timer when nothing else can happen. The same decide/evolve code
as the decider runs underneath, starts are completed by the decider shell's own
``domain.pins.complete_start``, and what follows each decision is the runtime's own
``domain.effects.effects`` (same task ids, timers, retries, children and input ids), only
carried out in memory: a simulation is a faithful dry run of a definition.

A script entry's ``push`` (a list of definitions) registers them when its task is answered, as
``defs push`` would mid-run: running parents keep the children they pinned at their start,
parents started later and unpinned references see the pushed versions.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, assert_never

from es_sched.domain import commands as c
from es_sched.domain.decide import decide
from es_sched.domain.effects import (
    ClearTimer,
    Effect,
    NotifyParent,
    QueueTask,
    SetTimer,
    StartChild,
    TerminateChild,
    WakeRetry,
    child_input,
    effects,
)
from es_sched.domain.events import Event
from es_sched.domain.evolve import fold
from es_sched.domain.ids import counter_ids
from es_sched.domain.pins import Found, complete_start, taskdefs_used
from es_sched.domain.scripts import ScriptEngine
from es_sched.domain.state import IN_PROGRESS, WorkflowState
from es_sched.errors import DomainError

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
MAX_STEPS = 200_000
WORKER = "sim-worker"


def scripted_answer(
    entry: Mapping[str, Any] | None,
    wf_id: str,
    task_id: str,
    attempt: int,
    input_ids: Callable[[], str],
) -> list[c.Input]:
    """What the simulation's worker sends for a task it answers from script ``entry`` (None:
    no entry, it completes at once with an empty output): its lease, its start, then the
    outcome; nothing after the start for ``IN_PROGRESS`` (it keeps the task, timeouts act).
    ``testkit.simulated`` answers the ready queue on Kafka with this too."""
    status = str((entry or {}).get("status", "COMPLETED")).upper()
    output = dict((entry or {}).get("output") or {})
    lease: dict[str, Any] = dict(
        task_id=task_id,
        attempt=attempt,
        worker_id=WORKER,
        lease_epoch=1,
        lease_token=f"lease-{task_id}",
    )
    out: list[c.Input] = [
        c.DispatchTask(input_ids(), wf_id, **lease),
        c.ReportStarted(input_ids(), wf_id, **lease),
    ]
    if status == "COMPLETED":
        out.append(c.ReportCompleted(input_ids(), wf_id, output=output, **lease))
    elif status in ("FAILED", "FAILED_WITH_TERMINAL_ERROR"):
        reason = str((entry or {}).get("reason") or output.get("reason") or "failed by script")
        terminal = status == "FAILED_WITH_TERMINAL_ERROR"
        out.append(
            c.ReportFailed(
                input_ids(), wf_id, reason=reason, terminal=terminal, output=output, **lease
            )
        )
    return out


@dataclass
class _Workflow:
    state: WorkflowState | None = None
    events: list[Event] = field(default_factory=list)
    path: tuple[str, ...] = ()  # SUB_WORKFLOW refs from the root to this workflow
    children: dict[str, str] = field(default_factory=dict)  # SUB_WORKFLOW ref -> latest child
    started: list[tuple[str, int, str]] = field(default_factory=list)  # (ref, attempt, child id)
    failure_workflow: str | None = None


class Simulation:
    def __init__(
        self,
        definitions: Sequence[Mapping[str, Any]],
        taskdefs: Sequence[Mapping[str, Any]] = (),
        script: Sequence[Mapping[str, Any]] = (),
        scripts: ScriptEngine | None = None,
        start: datetime = EPOCH,
        requeue_after: float | None = None,
    ) -> None:
        self.definitions = [dict(d) for d in definitions]
        self.taskdefs = [dict(t) for t in taskdefs]
        self.script = [dict(s) for s in script]
        self.used = [False] * len(self.script)
        self.scripts = scripts
        self.now = start
        self.requeue_after = requeue_after  # the reconciler: off, this queue loses nothing
        self.ids = counter_ids("task")
        self.wf_ids = counter_ids("wf")
        self.workflows: dict[str, _Workflow] = {}
        self.queue: deque[tuple[str, c.Input]] = deque()
        self.timers: list[tuple[datetime, int, str, c.FireTimer]] = []
        self.input_ids = counter_ids("in")
        self.timer_seq = itertools.count()
        self.cleared: list[str] = []  # the ids of every ClearTimer, in order
        self._timer_seqs: dict[str, int] = {}  # timer id -> its live heap entry's seq
        self._dropped: set[int] = set()  # heap entries of cleared timers, skipped when due

    # -- definitions ------------------------------------------------------------------------
    def find(self, name: str, version: int | None) -> dict[str, Any] | None:
        matches: list[dict[str, Any]] = [d for d in self.definitions if d.get("name") == name]
        if version is not None:
            matches = [d for d in matches if d.get("version", 1) == version]
        return max(matches, key=lambda d: int(d.get("version", 1))) if matches else None

    # -- running ----------------------------------------------------------------------------
    def run(
        self, definition: Mapping[str, Any], workflow_input: Mapping[str, Any], detail: bool = False
    ) -> dict[str, Any]:
        root = self.wf_ids()
        self.workflows[root] = _Workflow()
        self.queue.append((root, self._start(root, dict(definition), dict(workflow_input))))
        self._drain()
        return self.report(root, detail)

    def act(self, command: c.Command, detail: bool = False) -> dict[str, Any]:
        """Send an operator's command (a restart, a rerun, a retry...) to a simulated workflow
        and run until nothing more can happen, as ``run`` does; the script answers the tasks
        it schedules where entries are left, the rest complete at once."""
        self.queue.append((command.workflow_id, command))
        self._drain()
        return self.report(command.workflow_id, detail)

    def _drain(self) -> None:
        steps = 0
        while steps < MAX_STEPS:
            steps += 1
            if self.queue:
                wf_id, inp = self.queue.popleft()
                self._apply(wf_id, inp)
            elif not self._signal_waiting() and not self._fire_next_timer():
                break

    def _start(
        self, wf_id: str, definition: dict[str, Any], inp: dict[str, Any], **extra: Any
    ) -> c.StartWorkflow:
        return c.StartWorkflow(
            input_id=self.input_ids(),
            workflow_id=wf_id,
            name=str(definition.get("name", "")),
            version=definition.get("version"),
            input=inp,
            definition=definition,
            taskdefs=self.taskdefs_for(definition),
            **extra,
        )

    def _apply(self, wf_id: str, inp: c.Input) -> None:
        wf = self.workflows.get(wf_id)
        if wf is None or (wf.state is None and not isinstance(inp, c.StartWorkflow)):
            return  # a workflow that never started: the runtime answers workflow.rejected
        if isinstance(inp, c.StartWorkflow) and wf.state is None:
            # As the decider's shell does; an unknown definition stays unfilled and the core
            # refuses the start (workflow.rejected, nothing follows).
            inp = complete_start(inp, self.resolve) or inp
        events = decide(wf.state, inp, self.now, self.ids, self.scripts)
        wf.events.extend(events)
        if events:
            wf.state = fold(events, wf.state)
        if wf.state is not None:  # None: a start refused (workflow.rejected), nothing follows
            self.follow(wf_id, events)

    def follow(self, wf_id: str, events: list[Event]) -> None:
        """Carry out what follows ``events``, already folded into the workflow's state."""
        wf = self.workflows[wf_id]
        assert wf.state is not None
        for fx in effects(wf.state, events, self.requeue_after):
            self._perform(wf_id, wf, fx)

    def _perform(self, wf_id: str, wf: _Workflow, fx: Effect) -> None:
        match fx:
            case QueueTask():
                self._work(wf_id, wf, fx)
            case SetTimer():
                self._timer_seqs[fx.timer.timer_id] = self._at(fx.timer.due_at, fx.fire)
            case ClearTimer():
                self.cleared.append(fx.timer_id)
                seq = self._timer_seqs.pop(fx.timer_id, None)
                if seq is not None:
                    self._dropped.add(seq)
            case WakeRetry():
                self._at(fx.due_at, fx.fire)
            case StartChild():
                self._start_child(wf, fx)
            case TerminateChild() | NotifyParent():
                self.queue.append((fx.input.workflow_id, fx.input))
            case _:
                assert_never(fx)

    def _at(self, due: datetime, fire: c.FireTimer) -> int:
        seq = next(self.timer_seq)
        heapq.heappush(self.timers, (due, seq, fire.workflow_id, fire))
        return seq

    def resolve(self, name: str, version: int | None) -> Found | None:
        """The simulation's registry: its definitions, each with the TaskDefs it uses."""
        definition = self.find(name, version)
        return (definition, self.taskdefs_for(definition)) if definition is not None else None

    def taskdefs_for(self, definition: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The TaskDefs ``definition`` uses, the last given of a name winning, as the
        definition registry answers: a simulated start pins what a real one does."""
        return taskdefs_used(definition, {str(td.get("name")): td for td in self.taskdefs})

    def _start_child(self, parent: _Workflow, fx: StartChild) -> None:
        child_id, st = fx.child_workflow_id, parent.state
        ref = st.tasks[fx.parent_task_id].def_ref if fx.parent_task_id and st else None
        self.workflows[child_id] = _Workflow(path=(*parent.path, ref) if ref else parent.path)
        if ref and fx.parent_task_id and st:
            parent.children[ref] = child_id
            parent.started.append((ref, st.tasks[fx.parent_task_id].attempt, child_id))
        elif fx.name == (st.definition.failure_workflow if st else None):
            parent.failure_workflow = child_id
        inp = child_input(fx, self.resolve)
        if inp is not None:
            self.queue.append((inp.workflow_id, inp))

    def _work(self, wf_id: str, wf: _Workflow, p: QueueTask) -> None:
        entry = self._take(wf.path, p.ref, p.attempt, external=False)
        for inp in scripted_answer(entry, wf_id, p.task_id, p.attempt, self.input_ids):
            self.queue.append((wf_id, inp))

    def _take(
        self, path: tuple[str, ...], ref: str, attempt: int, external: bool
    ) -> dict[str, Any] | None:
        sub = path[-1] if path else None
        for i, entry in enumerate(self.script):
            if self.used[i] or entry.get("ref") != ref or bool(entry.get("external")) != external:
                continue
            if entry.get("in_subworkflow_of") != sub:
                continue
            if "attempt" in entry and int(entry["attempt"]) != attempt:
                continue
            self.used[i] = True
            self.definitions += [dict(d) for d in entry.get("push") or []]
            return entry
        return None

    def _signal_waiting(self) -> bool:
        for wf_id, wf in self.workflows.items():
            st = wf.state
            if st is None or st.terminal:
                continue
            for task_id in st.latest.values():
                task = st.tasks[task_id]
                if task.task_type == "WAIT" and task.status == IN_PROGRESS:
                    entry = self._take(wf.path, task.ref, task.attempt, external=True)
                    if entry is not None:
                        status = str(entry.get("status", "COMPLETED")).upper()
                        self.queue.append(
                            (
                                wf_id,
                                c.SignalWorkflow(
                                    self.input_ids(),
                                    wf_id,
                                    ref=task.ref,
                                    status=status,
                                    output=dict(entry.get("output") or {}),
                                ),
                            )
                        )
                        return True
        return False

    def _fire_next_timer(self) -> bool:
        while self.timers:
            due, seq, wf_id, fire = heapq.heappop(self.timers)
            st = self.workflows[wf_id].state
            if st is None or st.terminal or seq in self._dropped:
                continue
            self.now = max(self.now, due)
            self.queue.append((wf_id, fire))
            return True
        return False

    # -- reporting --------------------------------------------------------------------------
    def report(self, wf_id: str, detail: bool = False) -> dict[str, Any]:
        """The simulate result; ``detail`` adds task inputs/outputs, variables and every child."""
        wf = self.workflows[wf_id]
        st = wf.state
        if st is None:
            raise DomainError("the workflow never started")
        tasks = []
        for t in sorted(st.tasks.values(), key=lambda t: t.order):
            row: dict[str, Any] = {
                "taskReferenceName": t.ref,
                "taskType": t.task_type,
                "status": t.status,
                "attempt": t.attempt,
            }
            if detail:
                row |= {"input": t.input, "output": t.output, "reason": t.reason}
            tasks.append(row)
        result: dict[str, Any] = {
            "workflowId": wf_id,
            "name": st.definition.name,
            "status": st.status,
            "output": st.output,
            "tasks": tasks,
            "subworkflows": {
                ref: self.report(child, detail)
                for ref, child in wf.children.items()
                if self.workflows[child].state
            },
        }
        if st.reason:
            result["reasonForIncompletion"] = st.reason
        if detail:
            result |= {"input": st.input, "variables": st.variables}
            result["children"] = [
                {"parent_ref": ref, "parent_attempt": attempt, **self.report(child, detail)}
                for ref, attempt, child in wf.started
                if self.workflows[child].state
            ]
        if wf.failure_workflow and self.workflows[wf.failure_workflow].state:
            result["failureWorkflow"] = self.report(wf.failure_workflow, detail)
        result["events"] = len(wf.events)
        result["virtualSeconds"] = (self.now - EPOCH).total_seconds()
        return result
