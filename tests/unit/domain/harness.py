"""A hand-driven decider for unit tests: feed inputs one by one at chosen times."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from es_sched.domain import commands as c
from es_sched.domain.decide import decide
from es_sched.domain.events import Event
from es_sched.domain.evolve import fold
from es_sched.domain.ids import counter_ids
from es_sched.domain.state import TaskState, WorkflowState
from es_sched.domain.timeouts import Learned
from es_sched.scripting.quickjs import QuickJsEngine

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
SCRIPTS = QuickJsEngine()


def task(ref: str, name: str | None = None, type_: str = "SIMPLE", **extra: Any) -> dict[str, Any]:
    return {"name": name or ref, "taskReferenceName": ref, "type": type_, **extra}


def workflow(*tasks: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"name": extra.pop("name", "wf"), "version": 1, "tasks": list(tasks), **extra}


class Driver:
    def __init__(
        self,
        definition: dict[str, Any],
        inp: dict[str, Any] | None = None,
        taskdefs: list[dict[str, Any]] | None = None,
        workflow_id: str = "wf-1",
        learned: Learned | None = None,
    ) -> None:
        self.learned = learned  # what the decider's stats view would answer (ADR 65)
        self.now = T0
        self.ids = counter_ids("t")
        self.inputs = counter_ids("in")
        self.events: list[Event] = []
        self.state: WorkflowState | None = None
        self.workflow_id = workflow_id
        self.send(
            c.StartWorkflow(
                "start-1",
                workflow_id,
                name=definition["name"],
                input=inp or {},
                definition=definition,
                taskdefs=taskdefs or [],
            )
        )

    def send(self, inp: c.Input) -> list[Event]:
        new = decide(self.state, inp, self.now, self.ids, SCRIPTS, self.learned)
        self.events += new
        self.state = fold(new, self.state)
        return new

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)

    @property
    def st(self) -> WorkflowState:
        assert self.state is not None
        return self.state

    def latest(self, ref: str) -> TaskState:
        found = self.st.instance(ref)
        assert found is not None, f"no task {ref}"
        return found

    def report(self, ref: str, status: str = "COMPLETED", **extra: Any) -> list[Event]:
        """Dispatch (if needed), start and finish the newest attempt of ``ref`` as a worker."""
        t = self.latest(ref)
        lease = {
            "worker_id": "w1",
            "lease_epoch": t.lease_epoch or 1,
            "lease_token": f"tok-{t.task_id}",
        }
        base: dict[str, Any] = {"task_id": t.task_id, "attempt": t.attempt, **lease}
        out: list[Event] = []
        if t.lease_token is None:
            out += self.send(c.DispatchTask(self.inputs(), self.workflow_id, **base))
        if status == "STARTED":
            return out + self.send(c.ReportStarted(self.inputs(), self.workflow_id, **base))
        if status == "COMPLETED":
            return out + self.send(
                c.ReportCompleted(self.inputs(), self.workflow_id, **base, **extra)
            )
        return out + self.send(
            c.ReportFailed(
                self.inputs(), self.workflow_id, **base, terminal=status == "TERMINAL", **extra
            )
        )

    def fire(self, kind: str, ref: str | None = None) -> list[Event]:
        task_id = self.latest(ref).task_id if ref else None
        return self.send(c.FireTimer(self.inputs(), self.workflow_id, kind=kind, task_id=task_id))

    def rows(self) -> list[tuple[str, str, str]]:
        return [
            (t.ref, t.task_type, t.status)
            for t in sorted(self.st.tasks.values(), key=lambda t: t.order)
        ]

    def types(self, events: list[Event] | None = None) -> list[str]:
        return [e.type for e in (self.events if events is None else events)]
