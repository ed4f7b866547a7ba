"""Hand-made logs for the checker's unit tests: a decider driven by hand whose inputs and
events are laid out as the topics hold them (one partition each, offsets counted up)."""

from __future__ import annotations

import dataclasses
from typing import Any

from es_sched.audit.log import At, Log, LoggedEvent, LoggedInput
from es_sched.domain import commands as c
from es_sched.domain.events import Event
from es_sched.domain.ids import workflow_id_for_command
from tests.unit.domain.harness import Driver, task, workflow

EVENTS, COMMANDS, RESULTS = "p.events", "p.commands", "p.task-results"
TWO_TASKS = workflow(task("a", "enc"), task("b", "pack"), name="two")


class Recording(Driver):
    """A ``Driver`` that keeps every input it sends, as the topics would."""

    def __init__(self, definition: dict[str, Any], command_id: str = "start-1", **kw: Any) -> None:
        self.sent: list[c.Input] = []
        self.command_id = command_id
        super().__init__(definition, workflow_id=workflow_id_for_command(command_id), **kw)

    def send(self, inp: c.Input) -> list[Event]:
        if isinstance(inp, c.StartWorkflow):  # the Driver names every start "start-1"
            inp = dataclasses.replace(inp, input_id=self.command_id)
        self.sent.append(inp)
        return super().send(inp)

    def finish(self) -> Recording:
        for ref in ("a", "b"):
            self.report(ref)
        return self


def layout(events: list[Event], inputs: list[c.Input]) -> Log:
    """Events on one events partition, commands and worker inputs on theirs, in order."""
    log = Log(events=[LoggedEvent(e, At(EVENTS, 0, i)) for i, e in enumerate(events)])
    counters = {COMMANDS: 0, RESULTS: 0}
    for inp in inputs:
        topic = COMMANDS if isinstance(inp, c.Command | c.FireTimer) else RESULTS
        log.inputs.append(LoggedInput(inp, At(topic, 0, counters[topic]), inp.workflow_id))
        counters[topic] += 1
    return log


def recorded(*drivers: Recording) -> Log:
    return layout([e for d in drivers for e in d.events], [i for d in drivers for i in d.sent])
