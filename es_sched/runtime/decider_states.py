"""The states a decider holds: decoded, or resting as their changelog snapshot (ADR 52).

A decider restoring its partitions reads every kept snapshot, and with a day's retention (ADR
18) almost all of them are of ended workflows that no input will name again before they are
retired. Decoding those was most of a restore's CPU
(``bench/results/current/restore_cpu.json``). An ended workflow's snapshot says so
in a header (status, seq, end time: what retention reads), so the restore keeps it as read
(``Resting``) and this map decodes it the first time an input asks for it (``get``), then
holds the state as any other. Retirement reads a resting entry's header fields (``peek``)
and never decodes it.

Obligations of the owner: every state it learns goes in by ``[]=`` or ``update`` (which
replace a resting entry), a restore's by ``keep``; ``pop`` forgets either kind.

A resting snapshot is decoded only when an input names it, so an unreadable one (a corrupt
record: the decider wrote it, read it whole and checked its chunks) raises a ``SchemaError``
then, and the decider dead-letters that input with the reason instead of refusing to start.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import Protocol

from es_sched.domain.state import WorkflowState
from es_sched.serialization.changelog import Resting


class Ending(Protocol):
    """What retention reads of a held workflow, decoded or resting."""

    @property
    def workflow_id(self) -> str: ...
    @property
    def status(self) -> str: ...
    @property
    def seq(self) -> int: ...
    @property
    def ended_at(self) -> datetime | None: ...


class KeptStates:
    """Workflow id -> its state, decoding a resting one on first use."""

    def __init__(self) -> None:
        self._states: dict[str, WorkflowState] = {}
        self._resting: dict[str, Resting] = {}
        self.decoded = 0  # resting states an input asked for since the last restore

    def get(self, workflow_id: str) -> WorkflowState | None:
        st = self._states.get(workflow_id)
        if st is None and workflow_id in self._resting:
            st = self._resting[workflow_id].state()
            del self._resting[workflow_id]  # only once decoded: a failed decode leaves it
            self._states[workflow_id] = st
            self.decoded += 1
        return st

    def peek(self, workflow_id: str) -> Ending | None:
        """Its status, seq and end time without decoding it."""
        return self._states.get(workflow_id) or self._resting.get(workflow_id)

    def keep(self, kept: WorkflowState | Resting) -> None:
        """A restored state, decoded or resting."""
        if isinstance(kept, Resting):
            self._states.pop(kept.workflow_id, None)
            self._resting[kept.workflow_id] = kept
        else:
            self[kept.workflow_id] = kept

    def __setitem__(self, workflow_id: str, st: WorkflowState) -> None:
        self._states[workflow_id] = st
        self._resting.pop(workflow_id, None)

    def update(self, states: Mapping[str, WorkflowState]) -> None:
        """A batch's states (each commit): one C-level update, not a call per state (a loop of
        ``[]=`` was 1 % of the media decider's samples). A state the batch changed was asked
        for by ``get`` first, which took it out of the resting ones: the intersection is
        empty but for a caller that did not."""
        self._states.update(states)
        if self._resting:
            for workflow_id in states.keys() & self._resting.keys():
                del self._resting[workflow_id]

    def pop(self, workflow_id: str) -> None:
        self._states.pop(workflow_id, None)
        self._resting.pop(workflow_id, None)

    def __len__(self) -> int:
        return len(self._states) + len(self._resting)

    @property
    def resting(self) -> int:
        return len(self._resting)

    def values(self) -> Iterator[WorkflowState]:
        """Every state, the resting ones decoded (benchmarks and tests; not on a hot path)."""
        for workflow_id in [*self._states, *self._resting]:
            st = self.get(workflow_id)
            if st is not None:
                yield st
