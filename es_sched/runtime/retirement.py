"""The decider's side of bounded state (ADR 18): which ended workflows to forget in this batch,
the records that forget them, and the compact ended markers kept in their place.

``domain.retention`` decides (``due_at``, from a state's status and end time, which a state
kept undecoded carries beside its snapshot: ADR 52); this module only keeps a heap of
candidate times so a batch does not scan every state, and turns a decision into records: a
tombstone for the workflow's snapshot and its ended marker, both on the workflow's changelog
partition, produced in the decider's transaction. ``forget`` runs from the batch's commit hook,
so memory never runs ahead of the log; an aborted batch puts its picks back (``unpick``).

Markers are held packed, one ``int`` per workflow id (seq, partition, status), about 150 bytes
each against a few KiB for a state.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from datetime import datetime

from es_sched.domain.retention import ENDED_STATUSES, Ended, due_at, ended_marker, forget_time
from es_sched.domain.state import WorkflowState
from es_sched.kafka.topics import Topics
from es_sched.runtime.decider_states import Ending, KeptStates
from es_sched.runtime.outbox import Record
from es_sched.serialization.changelog import encode_ended, ended_key

_STATUS_BITS, _PARTITION_BITS = 4, 16
_STATUS_OF = {s: i for i, s in enumerate(ENDED_STATUSES)}


class EndedIndex:
    """Forgotten workflows of the assigned partitions: id -> packed (seq, partition, status)."""

    def __init__(self) -> None:
        self._packed: dict[str, int] = {}

    def add(self, partition: int, ended: Ended) -> None:
        self._packed[ended.workflow_id] = (
            (ended.seq << (_PARTITION_BITS + _STATUS_BITS))
            | (partition << _STATUS_BITS)
            | _STATUS_OF[ended.status]
        )

    def get(self, workflow_id: str) -> Ended | None:
        packed = self._packed.get(workflow_id)
        if packed is None:
            return None
        status = ENDED_STATUSES[packed & ((1 << _STATUS_BITS) - 1)]
        return Ended(workflow_id, status, packed >> (_PARTITION_BITS + _STATUS_BITS))

    def drop(self, partitions: set[int]) -> None:
        mask = (1 << _PARTITION_BITS) - 1
        self._packed = {
            wf: v
            for wf, v in self._packed.items()
            if ((v >> _STATUS_BITS) & mask) not in partitions
        }

    def __len__(self) -> int:
        return len(self._packed)


class Retirement:
    def __init__(self, topics: Topics, retain_s: float, max_per_batch: int) -> None:
        self.topics, self.retain_s, self.max_per_batch = topics, retain_s, max_per_batch
        self.ended = EndedIndex()
        self._heap: list[tuple[float, str]] = []
        self._picked: list[tuple[float, str]] = []

    def watch(self, st: Ending) -> None:
        """Remember when ``st`` (just ended, or restored ended) may be forgotten."""
        at = forget_time(st.status, st.ended_at, self.retain_s)
        if at is not None:
            heapq.heappush(self._heap, (at.timestamp(), st.workflow_id))

    def pick(
        self,
        now: datetime,
        states: KeptStates,
        staged: Mapping[str, WorkflowState],
        partition_of: Mapping[str, int],
    ) -> tuple[list[Record], list[tuple[int, Ended]]]:
        """The workflows to forget in this batch and their records. A workflow the batch
        touched is left for later (its new state is watched again when it commits)."""
        records: list[Record] = []
        picked: list[tuple[int, Ended]] = []
        self._picked = []
        while self._heap and self._heap[0][0] <= now.timestamp():
            if len(picked) >= self.max_per_batch:
                break
            entry = heapq.heappop(self._heap)
            self._picked.append(entry)
            wf = entry[1]
            st = states.peek(wf)  # a resting state is not decoded to be forgotten
            if st is None or wf in staged or not due_at(st.status, st.ended_at, now, self.retain_s):
                continue  # forgotten already, revoked, touched now, or retried since
            part, gone = partition_of[wf], ended_marker(wf, st.status, st.seq)
            records += [
                Record(self.topics.changelog, wf, None, partition=part),
                Record(self.topics.changelog, ended_key(wf), encode_ended(gone), partition=part),
            ]
            picked.append((part, gone))
        return records, picked

    def unpick(self) -> None:
        """The batch did not commit: its picks are candidates again."""
        for entry in self._picked:
            heapq.heappush(self._heap, entry)
        self._picked = []

    def forget(
        self,
        picked: list[tuple[int, Ended]],
        states: KeptStates,
        partition_of: dict[str, int],
    ) -> None:
        """After the commit: the states leave memory, their markers stay."""
        for part, gone in picked:
            states.pop(gone.workflow_id)
            partition_of.pop(gone.workflow_id, None)
            self.ended.add(part, gone)
        self._picked = []
