"""View models of the workflow page's panels and the definition editor: plain data in, plain
data out, so each is unit-tested without a server.

- ``variables``: a workflow's variables as the core folds them (``domain.evolve``): the
  definition's ``variables``, merged with each ``workflow.variables_set``, reset by a restart.
- ``problems_by_task``: validation problems (``domain.validation``'s ``task 'ref': ...``)
  grouped by the task they name, so the editor shows each beside its task.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

JSON = dict[str, Any]
_TASK = re.compile(r"task '([^']+)': ")


def variables(definition: Mapping[str, Any], events: Iterable[Mapping[str, Any]]) -> JSON:
    initial = dict(definition.get("variables") or {})
    found = dict(initial)
    for event in events:
        payload = event.get("payload") or {}
        if event.get("type") == "workflow.variables_set":
            found = {**found, **dict(payload.get("variables") or {})}
        elif event.get("type") == "workflow.restarted":
            again = payload.get("definition") or definition
            initial = dict(again.get("variables") or {})
            found = dict(initial)
    return found


def problems_by_task(problems: Iterable[str]) -> dict[str | None, list[str]]:
    """``{ref: [problem, ...]}``; problems naming no task under None (the definition's own)."""
    grouped: dict[str | None, list[str]] = {}
    for problem in problems:
        found = _TASK.search(problem)
        ref = found.group(1) if found else None
        text = problem[found.end() :] if found else problem
        grouped.setdefault(ref, []).append(text)
    return grouped


def task_refs(definition: Mapping[str, Any]) -> list[tuple[int, str, str]]:
    """Every task of ``definition`` in document order, nested ones too: (depth, ref, type)."""
    out: list[tuple[int, str, str]] = []

    def walk(tasks: Any, depth: int) -> None:
        for task in tasks if isinstance(tasks, list) else []:
            if not isinstance(task, Mapping):
                continue
            out.append((depth, str(task.get("taskReferenceName", "?")), str(task.get("type", ""))))
            for branch in (task.get("decisionCases") or {}).values():
                walk(branch, depth + 1)
            walk(task.get("defaultCase"), depth + 1)
            for branch in task.get("forkTasks") or []:
                walk(branch, depth + 1)
            walk(task.get("loopOver"), depth + 1)

    walk(definition.get("tasks"), 0)
    return out
