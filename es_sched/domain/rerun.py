"""Restart and rerun (Conductor's ``restart`` and ``rerun``): which task instances a workflow
in a terminal state resets, decided once here; the folds only apply the list (ADR 27).

- **Restart** (``RestartWorkflow``, or a ``RerunWorkflow`` without a task): every newest
  instance is reset; the workflow runs again from its first task with the same id, the same
  input (or the one given) and, when the command carries one, another definition.
- **Rerun from a task** (``RerunWorkflow.task``, a task id or reference name): the *root* is
  the newest instance of that reference, lifted to the container that must start again with
  it: a task inside a DO_WHILE (a ``__N`` reference) reruns its outermost loop from iteration
  1; a task of a dynamic fork's branch reruns the dynamic fork (its branches are computed
  again). The reset set is the root, every newest instance scheduled after it (its position
  in the workflow's task list, Conductor's execution order), and every JOIN waiting on a
  reset instance (to a fixpoint: the JOINs of enclosing forks too), so the walk schedules
  them again as the DAG says. Instances scheduled before the root keep their outcomes and
  outputs, which the new instances' inputs resolve against. A reset SUB_WORKFLOW task runs
  again as a new instance, which starts a new child workflow; the old child is left as it is.
- Reset instances are never changed: they keep their outcome and history, stop being current
  (``retried``: a later instance of their reference will exist) and leave ``latest``. The
  instances that replace them have **new task ids** and attempt 1, so (task, attempt) keeps one
  outcome (I3), a late report of a worker still running a reset instance names a task that is
  no longer current and is refused as stale, and the retry budget starts afresh.
- Refused (``command.rejected``) unless the workflow is in a terminal state: a running
  workflow has live leases and a walk in progress; terminate it first.

Pure: the command carries any other definition (the client resolves it, as for a start).
"""

from __future__ import annotations

from es_sched.domain import commands as c
from es_sched.domain.actions import permits
from es_sched.domain.context import Context
from es_sched.domain.events import CommandRejected, Payload, WorkflowRerun, WorkflowRestarted
from es_sched.domain.scheduling import schedule
from es_sched.domain.state import TaskState, WorkflowState
from es_sched.domain.validation import validate_workflow_cached

MAX_PROBLEMS_IN_REASON = 3


def _refuse(inp: c.Input, reason: str) -> list[Payload]:
    return [CommandRejected(inp.input_id, inp.TYPE, reason)]


def _newest(st: WorkflowState) -> list[TaskState]:
    return sorted((st.tasks[tid] for tid in st.latest.values()), key=lambda t: t.order)


def restart(st: WorkflowState, inp: c.RestartWorkflow | c.RerunWorkflow) -> list[Payload]:
    """``workflow.restarted``, or the refusal: the workflow is not in a terminal state, or the
    definition it should run with now fails validation."""
    verb = "restarted" if isinstance(inp, c.RestartWorkflow) else "rerun"
    if not permits("restart" if verb == "restarted" else "rerun", st.status):
        return _refuse(inp, f"only a workflow in a terminal state can be {verb}; it is {st.status}")
    if isinstance(inp, c.RestartWorkflow):
        new_input, definition = inp.input, inp.definition
    else:
        new_input, definition = inp.workflow_input, None
    if definition is not None:
        taskdefs = inp.taskdefs if isinstance(inp, c.RestartWorkflow) else []
        problems = validate_workflow_cached(definition, taskdefs)
        if problems:
            shown = "; ".join(problems[:MAX_PROBLEMS_IN_REASON])
            return _refuse(inp, f"invalid definition to restart with: {shown}")
    return [
        WorkflowRestarted(
            from_status=st.status,
            input=dict(st.input if new_input is None else new_input),
            reset=[t.task_id for t in _newest(st)],
            definition=definition,
            taskdefs=list(inp.taskdefs) if isinstance(inp, c.RestartWorkflow) else [],
            subworkflow_definitions=(
                list(inp.subworkflow_definitions) if isinstance(inp, c.RestartWorkflow) else []
            ),
        )
    ]


def rerun(st: WorkflowState, inp: c.RerunWorkflow) -> list[Payload]:
    """``workflow.rerun_started`` from ``inp.task``, a restart without it, or the refusal."""
    if inp.task is None:
        return restart(st, inp)
    if not permits("rerun", st.status):
        return _refuse(inp, f"only a workflow in a terminal state can be rerun; it is {st.status}")
    target = _target(st, inp.task)
    if target is None:
        return _refuse(inp, f"no task {inp.task!r} in this workflow (a task id or reference)")
    if target.callback:
        return _refuse(inp, f"task {target.ref!r} is a CALLBACK: it runs when the workflow ends")
    root = root_of(st, target)
    if root is not target and inp.task_input is not None:
        return _refuse(
            inp,
            f"task {target.ref!r} runs inside {root.ref!r}, which reruns as a whole: "
            "taskInput cannot be given for it",
        )
    return [
        WorkflowRerun(
            from_status=st.status,
            task_id=root.task_id,
            input=dict(st.input if inp.workflow_input is None else inp.workflow_input),
            reset=reset_from(st, root),
        )
    ]


def rerun_root(
    st: WorkflowState, started: WorkflowRerun, inp: c.RerunWorkflow, ctx: Context
) -> list[Payload]:
    """After ``started`` with a ``task_input``: the root scheduled again with that input
    merged over the one its parameters resolve to. Without one, the walk schedules it like
    any task whose reference has no current instance."""
    if inp.task_input is None:
        return []
    old = st.tasks[started.task_id]
    task = st.lookup_task(old.def_ref)
    assert task is not None and old.ref == old.def_ref  # rerun() lifted nothing: a plain task
    return schedule(st, task, old.ref, "", 0, ctx, extra_input=dict(inp.task_input))


def _target(st: WorkflowState, task: str) -> TaskState | None:
    """The newest instance of the task named by id (any attempt) or by reference."""
    found = st.tasks.get(task)
    ref = found.ref if found is not None else task
    current = st.latest.get(ref)
    return st.tasks[current] if current is not None else None


def root_of(st: WorkflowState, inst: TaskState) -> TaskState:
    """The instance a rerun from ``inst`` starts from: ``inst``, or the outermost DO_WHILE or
    the dynamic fork that must start again with it."""
    while True:
        outer = _container_to_rerun(st, inst)
        if outer is None:
            return inst
        inst = outer


def _container_to_rerun(st: WorkflowState, inst: TaskState) -> TaskState | None:
    if inst.def_ref not in st.definition.index:  # a dynamic fork's branch task
        forks = [
            t
            for t in _newest(st)
            if inst.def_ref in (t.output.get("forkedTasks") or []) and t.order < inst.order
        ]
        return forks[-1] if forks else None
    loops = []
    loc = st.definition.index.get(inst.def_ref)
    while loc is not None and loc.container is not None:
        outer = st.definition.index.get(loc.container)
        if outer is None:
            break
        if outer.task.type == "DO_WHILE":
            loops.append(outer.task.ref)
        loc = outer
    for ref in reversed(loops):  # the outermost loop first
        found = st.instance(ref)
        if found is not None and found.task_id != inst.task_id:
            return found
    return None


def reset_from(st: WorkflowState, root: TaskState) -> list[str]:
    """The task ids a rerun from ``root`` resets, in task order: ``root``, every newest
    instance scheduled after it, and every JOIN that waits on a reset instance."""
    newest = _newest(st)
    reset = {t.task_id for t in newest if t.order >= root.order}
    refs = {st.tasks[tid].ref for tid in reset}
    changed = True
    while changed:
        changed = False
        for t in newest:
            waits = t.input.get("joinOn") if t.task_type == "JOIN" else None
            if t.task_id not in reset and isinstance(waits, list) and refs & set(waits):
                reset.add(t.task_id)
                refs.add(t.ref)
                changed = True
    return [t.task_id for t in newest if t.task_id in reset]
