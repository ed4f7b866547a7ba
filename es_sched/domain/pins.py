"""Child workflow versions pinned when their parent starts (ADR 0012).

A parent's ``workflow.started`` carries, in ``subworkflow_definitions``, the exact document of
every child it may start, and in ``taskdefs`` the TaskDefs of every task type of the parent and
of those children, so pushing version 2 of a child while a parent runs changes nothing for that
parent, and replay never needs the registry.

- ``static_refs(definition)``: the children a definition names literally: a SUB_WORKFLOW's
  ``subWorkflowParam`` name and version, a START_WORKFLOW's ``startWorkflow`` name and version
  when both are literal, the ``failureWorkflow`` (latest), and those of inline definitions.
  A version of None means the latest one at the parent's start.
- ``complete_start(start, lookup)``: the one resolution a start goes through in the decider's
  shell and in the simulator: the definition from ``lookup`` when none is embedded, then every
  static child, transitively (a child's own children), looked up in the pins the start already
  carries first and in ``lookup`` (the registry) for the rest, with their TaskDefs (those the
  start carries win). A child ``lookup`` does not know stays unpinned.
- ``taskdefs_used(definition, taskdefs)``: the TaskDefs a definition's tasks use, inline
  sub-workflows' included; a registry's answer to a start.
- ``pinned_child(state, request)``: what a parent pinned for a child it now starts (definition,
  TaskDefs, the child's own pins), or None when nothing was pinned for it: a name or version
  computed from an expression, a child unknown when the parent started, or a history recorded
  before pins (its ``subworkflow_definitions`` are empty). The caller then looks the child up
  in the registry as it is now.

Pure: ``lookup`` is the caller's registry read, passed in.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from es_sched.domain import commands as c
from es_sched.domain.definitions import WorkflowDef
from es_sched.domain.events import WorkflowStartRequested
from es_sched.domain.parsed import parse_workflow_cached
from es_sched.domain.state import WorkflowState

JSON = dict[str, Any]
Found = tuple[JSON, list[JSON]]
Lookup = Callable[[str, int | None], Found | None]
"""(name, version) -> (definition, its TaskDefs) from a registry, or None when unknown."""


class ChildRef(NamedTuple):
    kind: str  # SUB_WORKFLOW | START_WORKFLOW | failureWorkflow
    name: str
    version: int | None  # None: the latest at the parent's start


class Pinned(NamedTuple):
    definitions: list[JSON]  # every child reachable from the root, once per (name, version)
    taskdefs: list[JSON]  # the root's TaskDefs and the children's, by name
    missing: list[tuple[ChildRef, str]]  # (reference, the workflow naming it) nobody knew


class Child(NamedTuple):
    """What a child starts with when its parent pinned it."""

    definition: JSON
    taskdefs: list[JSON]  # the parent's TaskDefs of the child's (and its children's) tasks
    pins: list[JSON]  # the child's own children, from the parent's pins


_REFS: dict[int, tuple[WorkflowDef, tuple[ChildRef, ...]]] = {}
_REFS_SIZE = 512  # static_refs by parsed definition


def static_refs(definition: Mapping[str, Any]) -> list[ChildRef]:
    """The children ``definition`` names literally (its own in document order, then those of
    its inline definitions), each once."""
    parsed, _ = parse_workflow_cached(definition)
    if parsed is None:
        return []
    hit = _REFS.get(id(parsed))
    if hit is not None and hit[0] is parsed:  # every start of a definition asks again
        return list(hit[1])
    refs: list[ChildRef] = []
    for doc in _with_inline(definition):
        each, _ = parse_workflow_cached(doc)
        for loc in each.index.values() if each is not None else ():
            task = loc.task
            if task.type == "SUB_WORKFLOW":
                param = task.get("subWorkflowParam")
                if isinstance(param, Mapping) and not isinstance(
                    param.get("workflowDefinition"), Mapping
                ):
                    refs += _literal("SUB_WORKFLOW", param.get("name"), param.get("version"))
            elif task.type == "START_WORKFLOW":
                spec = task.input_parameters.get("startWorkflow")
                if isinstance(spec, Mapping):
                    refs += _literal("START_WORKFLOW", spec.get("name"), spec.get("version"))
        refs += _literal("failureWorkflow", doc.get("failureWorkflow"), None)
    found = tuple(dict.fromkeys(refs))
    _REFS[id(parsed)] = (parsed, found)  # holding ``parsed`` keeps its id from being reused
    if len(_REFS) > _REFS_SIZE:
        _REFS.pop(next(iter(_REFS)))
    return list(found)


def pin(definition: Mapping[str, Any], taskdefs: list[JSON], lookup: Lookup) -> Pinned:
    """Every child reachable from ``definition`` through ``lookup``, and the TaskDefs they add.

    ``taskdefs`` (the root's) is returned as the same list object when no child adds one, so
    the core's caches keyed on identity keep hitting.
    """
    found: dict[tuple[str, int], JSON] = {}
    seen: set[tuple[str, int | None]] = set()
    missing: list[tuple[ChildRef, str]] = []
    added: dict[str, JSON] = {}
    given = {str(td.get("name")) for td in taskdefs}
    todo = [(ref, str(definition.get("name"))) for ref in static_refs(definition)]
    while todo:
        ref, needed_by = todo.pop(0)
        if (ref.name, ref.version) in seen:
            continue
        seen.add((ref.name, ref.version))
        hit = lookup(ref.name, ref.version)
        if hit is None:
            missing.append((ref, needed_by))
            continue
        doc, its_taskdefs = hit
        key = (str(doc.get("name")), _version(doc))
        if key in found:
            continue
        found[key] = doc
        for td in its_taskdefs:
            name = str(td.get("name"))
            if name not in given:
                added.setdefault(name, td)
        todo += [(r, key[0]) for r in static_refs(doc)]
    merged = taskdefs if not added else sorted([*taskdefs, *added.values()], key=_name)
    return Pinned(list(found.values()), merged, missing)


def complete_start(start: c.StartWorkflow, lookup: Lookup) -> c.StartWorkflow | None:
    """``start`` with its definition, its children's pinned definitions and their TaskDefs
    filled in; None when it names no definition ``lookup`` knows."""
    if start.definition is None:
        hit = lookup(start.name, start.version)
        if hit is None:
            return None
        definition, taskdefs = hit
    else:
        definition, taskdefs = start.definition, start.taskdefs
    carried = start.subworkflow_definitions
    pinned = pin(definition, taskdefs, _first(within(carried, taskdefs), lookup))
    if start.definition is not None and not pinned.definitions and not carried:
        return start  # no children: nothing to pin (the common case, kept cheap)
    return dataclasses.replace(
        start,
        definition=definition,
        taskdefs=pinned.taskdefs,
        subworkflow_definitions=pinned.definitions,
    )


def pinned_child(st: WorkflowState, p: WorkflowStartRequested) -> Child | None:
    """What the parent ``st`` pinned for the child ``p`` asks for; None when it pinned nothing
    for it (the caller asks the registry). An inline definition gets its own children's pins."""
    pins = st.subworkflow_definitions
    if not pins:
        return None  # nothing pinned: no children, or a history recorded before pins
    if p.definition is not None:
        doc: JSON | None = p.definition
    elif (p.name, p.version) in {(r.name, r.version) for r in static_refs(st.definition.raw)}:
        doc = find(pins, p.name, p.version)  # None: unknown when the parent started
    else:
        doc = None  # computed from an expression (or a dynamic fork): unknown at the start
    if doc is None:
        return None
    parent_taskdefs = [dict(td.raw) for td in st.taskdefs.values()]
    own = pin(doc, [], within(pins, parent_taskdefs))
    names = task_names([doc, *own.definitions])
    taskdefs = [td for td in parent_taskdefs if str(td.get("name")) in names]
    return Child(doc, taskdefs, own.definitions)


def find(pins: Sequence[JSON], name: str, version: int | None) -> JSON | None:
    """The pinned document of ``name`` at ``version``, or its highest pinned version for None
    (the latest when the parent started: every version pinned then was at most that one)."""
    docs = [d for d in pins if d.get("name") == name]
    if version is not None:
        docs = [d for d in docs if _version(d) == version]
    return max(docs, key=_version) if docs else None


def within(pins: Sequence[JSON], taskdefs: Sequence[JSON]) -> Lookup:
    """A look-up that only knows ``pins``, each with the TaskDefs of ``taskdefs`` it uses."""

    def look(name: str, version: int | None) -> Found | None:
        doc = find(pins, name, version)
        if doc is None:
            return None
        names = task_names([doc])
        return doc, [td for td in taskdefs if str(td.get("name")) in names]

    return look


def taskdefs_used(definition: Mapping[str, Any], taskdefs: Mapping[str, JSON]) -> list[JSON]:
    """The TaskDefs (``taskdefs``: name -> document) whose tasks ``definition`` has, those of
    its inline sub-workflow definitions included, by name: what a registry gives a start to
    pin. The definition registry and the simulator both ask this, so a simulated start pins
    what a real one does."""
    names = task_names([definition])
    return [td for name, td in sorted(taskdefs.items()) if name in names]


def task_names(definitions: Iterable[Mapping[str, Any]]) -> set[str]:
    """Every task name of the given definitions (inline sub-definitions included)."""
    names: set[str] = set()
    for definition in definitions:
        for doc in _with_inline(definition):
            parsed, _ = parse_workflow_cached(doc)
            names |= {loc.task.name for loc in parsed.index.values()} if parsed else set()
    return names


def _first(first: Lookup, then: Lookup) -> Lookup:
    return lambda name, version: first(name, version) or then(name, version)


def _with_inline(definition: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """``definition`` and every definition written inline in one of its SUB_WORKFLOW tasks."""
    out, todo = [], [definition]
    while todo:
        doc = todo.pop(0)
        out.append(doc)
        parsed, _ = parse_workflow_cached(doc)
        for loc in parsed.index.values() if parsed is not None else ():
            param = loc.task.get("subWorkflowParam") if loc.task.type == "SUB_WORKFLOW" else None
            inline = param.get("workflowDefinition") if isinstance(param, Mapping) else None
            if isinstance(inline, Mapping):
                todo.append(inline)
    return out


def _literal(kind: str, name: Any, version: Any) -> list[ChildRef]:
    """The reference when both parts are literal, else nothing (it is resolved when it starts)."""
    if not isinstance(name, str) or not name or "${" in name:
        return []
    if version is not None and (not isinstance(version, int) or isinstance(version, bool)):
        return []
    return [ChildRef(kind, name, version)]


def _version(doc: Mapping[str, Any]) -> int:
    version = doc.get("version", 1)
    return version if isinstance(version, int) else 1


def _name(td: Mapping[str, Any]) -> str:
    return str(td.get("name"))
