"""An index of each large dynamic fork's branches, so a decision costs O(branches touched).

Without it every walk of the DAG (``engine.step``) visits every branch of a FORK_JOIN_DYNAMIC
and its JOIN checks every joined task: O(branches) per input, O(branches^2) to schedule the
fork. A ``Fan`` keeps, for one completed dynamic fork, what the walk needs from its branches:

- ``cursor``: the first branch with no task instance (the walk schedules it next; branches are
  scheduled in order, so usually all below it have one),
- ``bad``: the branches whose newest attempt ended unsuccessfully (retry, optional or failure:
  the walk must look at them),
- ``open`` and ``ok``: how many branches run and how many succeeded (busy? JOIN done?).

Every other branch is "quiet": running (the walk only notes it is busy) or done (nothing to do),
so the walk visits ``bad`` and ``cursor`` alone and decides exactly what the full walk decides
(``engine.FULL_WALK`` turns the index off; tests compare both). ``evolve`` keeps the index with
each task change (``changed``); a restored state rebuilds it (``rebuild``), so it is derived
data, never written in a snapshot. It is kept only where the equivalence is plain: a fork
outside any loop, whose branches are single tasks of a type the walk does not descend into, and
whose references no other indexed fork uses (a later fork that redefines one drops the index).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from es_sched.domain.pickling import frozen_by_constructor
from es_sched.domain.state import TASK_SUCCESS, TASK_UNSUCCESSFUL, TaskState, WorkflowState

# Branch task types the walk descends into (or skips): their branches are not indexed.
WALKED = frozenset(
    {"SWITCH", "DECISION", "FORK_JOIN", "FORK_JOIN_DYNAMIC", "JOIN", "DO_WHILE", "CALLBACK"}
)
NONE, OPEN, OK, BAD = 0, 1, 2, 3


@dataclass(frozen=True)
class Fan:
    fork_id: str  # the FORK_JOIN_DYNAMIC instance whose forkedTasks these are
    refs: tuple[str, ...]  # branch references, in branch order
    pos: Mapping[str, int]  # ref -> branch position; built once, shared, never changed
    cursor: int  # the first branch without an instance (len(refs): all have one)
    bad: frozenset[int]  # branches whose newest attempt ended unsuccessfully
    open: int  # branches running (an instance that is not terminal)
    ok: int  # branches that succeeded

    def walk_positions(self) -> list[int]:
        """The branches the walk must look at, in branch order."""
        todo = sorted(self.bad)
        if self.cursor < len(self.refs) and self.cursor not in self.bad:
            todo = sorted((*todo, self.cursor))
        return todo


def category(task: TaskState | None) -> int:
    if task is None:
        return NONE
    if task.status in TASK_SUCCESS:
        return OK
    if task.status in TASK_UNSUCCESSFUL:
        return BAD
    return OPEN


def _count(fan: Fan, position: int, cat: int, sign: int) -> Fan:
    if cat == OPEN:
        return replace(fan, open=fan.open + sign)
    if cat == OK:
        return replace(fan, ok=fan.ok + sign)
    if cat == BAD:
        bad = fan.bad | {position} if sign > 0 else fan.bad - {position}
        return replace(fan, bad=bad)
    return fan


def _advance(st: WorkflowState, fan: Fan) -> Fan:
    cursor = fan.cursor
    while cursor < len(fan.refs) and fan.refs[cursor] in st.latest:
        cursor += 1
    return replace(fan, cursor=cursor) if cursor != fan.cursor else fan


def changed(st: WorkflowState, ref: str, before: TaskState | None, after: TaskState | None) -> None:
    """``st`` (a private copy) changed the newest instance of ``ref`` from ``before`` to
    ``after``: move that branch between the counts. O(1), and nothing when ``ref`` is no
    indexed branch."""
    fork_id = st.fan_of.get(ref)
    if fork_id is None:
        return
    fan = st.fans.get(fork_id)
    if fan is None:
        return
    old, new = category(before), category(after)
    if old == new:
        return
    position = fan.pos[ref]
    fan = _count(_count(fan, position, old, -1), position, new, +1)
    if old == NONE:
        fan = _advance(st, fan)
    st.fans = {**st.fans, fork_id: fan}


def dropped(st: WorkflowState, refs: Iterable[str]) -> None:
    """New dynamic tasks named ``refs`` redefine branches: a fork using any of them is no
    longer indexed (its walk goes back to visiting every branch)."""
    forks = {st.fan_of[r] for r in refs if r in st.fan_of}
    if forks & st.fans.keys():
        st.fans = {k: v for k, v in st.fans.items() if k not in forks}


def forked(st: WorkflowState, fork: TaskState) -> None:
    """Index the branches of ``fork``, a dynamic fork that just completed, if it is plain."""
    refs = tuple(str(r) for r in fork.output.get("forkedTasks") or [])
    if fork.ref != fork.def_ref or not refs or len(set(refs)) != len(refs):
        return  # inside a loop (suffixed), empty, or a reference twice: walk it in full
    if any(r in st.fan_of for r in refs):
        return  # another indexed fork uses a reference: walk this one in full
    tasks = [st.dynamic.get(r) for r in refs]
    if any(t is None or t.type in WALKED for t in tasks):
        return
    pos = {r: i for i, r in enumerate(refs)}
    fan = Fan(fork.task_id, refs, pos, 0, frozenset(), 0, 0)
    for i, r in enumerate(refs):
        fan = _count(fan, i, category(st.instance(r)), +1)
    st.fans = {**st.fans, fork.task_id: _advance(st, fan)}
    st.fan_of = {**st.fan_of, **dict.fromkeys(refs, fork.task_id)}


def is_dynamic_fork(st: WorkflowState, task: TaskState) -> bool:
    definition = st.lookup_task(task.def_ref)
    return definition is not None and definition.type == "FORK_JOIN_DYNAMIC"


def rebuild(st: WorkflowState) -> WorkflowState:
    """The index of a state built without ``evolve`` (a restored snapshot): every completed
    dynamic fork, in task order, as ``evolve`` would have indexed it."""
    st.fans, st.fan_of = {}, {}
    for task in st.tasks.values():
        # A succeeded instance that is no longer current was reset by a restart or rerun.
        forked_tasks = (
            task.status in TASK_SUCCESS and "forkedTasks" in task.output and not task.retried
        )
        if forked_tasks and is_dynamic_fork(st, task):
            dropped(st, (str(r) for r in task.output["forkedTasks"]))  # as at its scheduling
            forked(st, task)
    return st


frozen_by_constructor(globals())  # pickled through constructors (domain.pickling, ADR 51)
