"""A definition drawn as a simple SVG, and the default input the submit form starts from.

The diagram is a column of boxes, one per task in the order the definition lists them; the
tasks of a fork's branches, a switch's cases or a loop's body are indented under it with the
branch's name, so the shape is readable without a layout engine. Text goes through Jinja's
autoescaping in the template (``ops_definitions.html``), never into markup here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

JSON = dict[str, Any]
ROW_H, INDENT, BOX_W = 34, 24, 320


@dataclass(frozen=True)
class Box:
    x: int
    y: int
    width: int
    label: str  # "ref: name"
    kind: str  # the task type, or a branch's name
    branch: bool = False


@dataclass(frozen=True)
class Diagram:
    boxes: list[Box]
    width: int
    height: int


def diagram(definition: JSON) -> Diagram:
    boxes: list[Box] = []
    _walk(definition.get("tasks") or [], 0, boxes)
    width = max((b.x + b.width for b in boxes), default=BOX_W) + 8
    return Diagram(boxes, width, len(boxes) * ROW_H + 8)


def _walk(tasks: list[Any], depth: int, out: list[Box]) -> None:
    for task in tasks:
        if not isinstance(task, dict):
            continue
        kind = str(task.get("type") or "SIMPLE")
        label = f"{task.get('taskReferenceName', '?')}: {task.get('name', '?')}"
        out.append(Box(4 + depth * INDENT, 4 + len(out) * ROW_H, BOX_W, label, kind))
        for branch, inner in _branches(task):
            out.append(Box(4 + (depth + 1) * INDENT, 4 + len(out) * ROW_H, BOX_W, branch, "", True))
            _walk(inner, depth + 2, out)


def _branches(task: JSON) -> list[tuple[str, list[Any]]]:
    found: list[tuple[str, list[Any]]] = []
    for i, branch in enumerate(task.get("forkTasks") or []):
        found.append((f"branch {i + 1}", list(branch)))
    for case, inner in (task.get("decisionCases") or {}).items():
        found.append((f"case {case}", list(inner)))
    if task.get("defaultCase"):
        found.append(("default", list(task["defaultCase"])))
    if task.get("loopOver"):
        found.append(("loop", list(task["loopOver"])))
    return found


def default_input(definition: JSON) -> JSON:
    """``inputTemplate`` when the definition has one, else each of ``inputParameters`` as null
    (the names the workflow reads; the person fills in the values)."""
    template = definition.get("inputTemplate")
    if isinstance(template, dict) and template:
        return dict(template)
    params = definition.get("inputParameters") or []
    return {str(p): None for p in params if isinstance(p, str)}
