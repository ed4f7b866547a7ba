"""A workflow's DAG laid out for the console: definition + task rows -> positioned nodes, edges.

Pure (no I/O), so the drawing is tested without a browser and the page template only strokes
what this module placed. The definition is the one the workflow started with (the
``workflow.started`` event embeds it), parsed by the domain's own parser, so the console never
reads a definition differently from the decider.

The layout is a recursive block layout, top to bottom: a list of tasks stacks its blocks; a
SWITCH or a FORK puts its branches side by side under it (a switch marks the branch it took);
a DO_WHILE stacks its body under it with an edge back up to it. Each task is coloured by the
state of its latest row (the last iteration, the last attempt); refs of loop iterations
(``ref__2``) count as their ref.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from es_sched.domain.definitions import WorkflowTask
from es_sched.domain.parsed import parse_workflow_cached

NODE_W = 172
NODE_H = 38
GAP_X = 28
GAP_Y = 30
MARGIN = 16
NOT_STARTED = "NOT_STARTED"
BRANCHING = frozenset({"SWITCH", "DECISION", "FORK_JOIN", "FORK_JOIN_DYNAMIC"})
_ITERATION = re.compile(r"__\d+$")


@dataclass(frozen=True)
class Node:
    ref: str
    name: str
    type: str
    state: str  # the latest row's status, NOT_STARTED when the task has no row
    x: int
    y: int
    attempts: int = 0  # rows of this ref (attempts and iterations)
    iterations: int = 0  # the highest loop iteration seen (DO_WHILE bodies)
    child_workflow_id: str | None = None  # SUB_WORKFLOW: the child it started
    taken: bool | None = None  # inside a switch branch: was that branch taken (None: no switch)
    extra: int = 0  # FORK_JOIN_DYNAMIC: the tasks it forked (absent from the definition)


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    kind: str = "flow"  # flow | taken | skipped | loop
    label: str = ""
    points: tuple[tuple[int, int], ...] = ()


@dataclass
class Layout:
    nodes: list[Node] = field(default_factory=list)
    edges: list[Edge] = field(default_factory=list)
    width: int = 0
    height: int = 0
    problems: list[str] = field(default_factory=list)

    def node(self, ref: str) -> Node:
        return next(n for n in self.nodes if n.ref == ref)


@dataclass
class _Block:
    nodes: list[Node]
    edges: list[tuple[str, str, str, str]]  # (source, target, kind, label)
    width: int
    height: int
    entries: list[str]
    exits: list[str]


def base_ref(ref: str) -> str:
    return _ITERATION.sub("", ref)


def latest_rows(rows: Iterable[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    """Rows per base ref, oldest first (by iteration, then attempt)."""
    out: dict[str, list[Mapping[str, Any]]] = {}
    for row in rows:
        out.setdefault(base_ref(str(row["ref"])), []).append(row)
    for group in out.values():
        group.sort(key=lambda r: (int(r.get("iteration") or 0), int(r.get("attempt") or 0)))
    return out


def layout(definition: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]) -> Layout:
    parsed, problems = parse_workflow_cached(definition)
    if parsed is None:
        return Layout(problems=problems or ["the definition could not be parsed"])
    by_ref = latest_rows(rows)
    known: set[str] = set()
    block = _Builder(by_ref, known).sequence(parsed.tasks, None)
    unknown = sum(len(v) for k, v in by_ref.items() if k not in known)
    nodes = [_moved(_with_extra(n, unknown), MARGIN, MARGIN) for n in block.nodes]
    placed = {n.ref: n for n in nodes}
    edges = [
        Edge(s, t, kind, label, _route(placed[s], placed[t], kind))
        for s, t, kind, label in block.edges
    ]
    return Layout(nodes, edges, block.width + 2 * MARGIN, block.height + 2 * MARGIN, list(problems))


def _with_extra(node: Node, unknown: int) -> Node:
    if node.type != "FORK_JOIN_DYNAMIC" or not unknown:
        return node
    return Node(**{**node.__dict__, "extra": unknown})


def _route(a: Node, b: Node, kind: str) -> tuple[tuple[int, int], ...]:
    """Polyline from ``a`` to ``b``: down from a's bottom to b's top; a loop edge goes from
    the body's last node up the right side back to the DO_WHILE node."""
    if kind == "loop":
        right = max(a.x, b.x) + NODE_W + GAP_X // 2
        return (
            (a.x + NODE_W, a.y + NODE_H // 2),
            (right, a.y + NODE_H // 2),
            (right, b.y + NODE_H // 2),
            (b.x + NODE_W, b.y + NODE_H // 2),
        )
    ax, ay = a.x + NODE_W // 2, a.y + NODE_H
    bx, by = b.x + NODE_W // 2, b.y
    if ax == bx:
        return ((ax, ay), (bx, by))
    mid = by - GAP_Y // 2
    return ((ax, ay), (ax, mid), (bx, mid), (bx, by))


class _Builder:
    def __init__(self, rows: Mapping[str, list[Mapping[str, Any]]], known: set[str]) -> None:
        self.rows, self.known = rows, known

    def sequence(self, tasks: Sequence[WorkflowTask], taken: bool | None) -> _Block:
        blocks = [self.task(t, taken) for t in tasks]
        if not blocks:
            return _Block([], [], 0, 0, [], [])
        width = max(b.width for b in blocks)
        nodes: list[Node] = []
        edges: list[tuple[str, str, str, str]] = []
        y = 0
        previous: list[str] = []
        for b in blocks:
            dx = (width - b.width) // 2
            nodes += [_moved(n, dx, y) for n in b.nodes]
            edges += b.edges
            edges += [(p, e, "flow", "") for p in previous for e in b.entries]
            previous = b.exits
            y += b.height + GAP_Y
        return _Block(nodes, edges, width, y - GAP_Y, blocks[0].entries, blocks[-1].exits)

    def node(self, task: WorkflowTask, taken: bool | None) -> Node:
        self.known.add(task.ref)
        rows = self.rows.get(task.ref, [])
        last = rows[-1] if rows else None
        child = (last.get("output") or {}).get("subWorkflowId") if last else None
        return Node(
            ref=task.ref,
            name=task.name,
            type=task.type,
            state=str(last["status"]) if last else NOT_STARTED,
            x=0,
            y=0,
            attempts=len(rows),
            iterations=max((int(r.get("iteration") or 0) for r in rows), default=0),
            child_workflow_id=str(child) if child else None,
            taken=taken,
        )

    def task(self, task: WorkflowTask, taken: bool | None) -> _Block:
        head = self.node(task, taken)
        if task.type in BRANCHING and task.type != "FORK_JOIN_DYNAMIC":
            return self.branches(head, task, taken)
        if task.type == "DO_WHILE" and task.loop_over:
            body = self.sequence(task.loop_over, taken)
            width = max(NODE_W, body.width)
            top = _moved(head, (width - NODE_W) // 2, 0)
            dx = (width - body.width) // 2
            nodes = [top] + [_moved(n, dx, NODE_H + GAP_Y) for n in body.nodes]
            edges = [(head.ref, e, "flow", "") for e in body.entries] + body.edges
            edges += [(x, head.ref, "loop", "") for x in body.exits]
            # The loop's right-hand return edge needs room beside the body.
            return _Block(
                nodes, edges, width + GAP_X, NODE_H + GAP_Y + body.height, [head.ref], body.exits
            )
        return _Block([head], [], NODE_W, NODE_H, [task.ref], [task.ref])

    def branches(self, head: Node, task: WorkflowTask, taken: bool | None) -> _Block:
        chosen = self.chosen_case(task, head)
        labelled: list[tuple[str, Sequence[WorkflowTask]]]
        if task.type in ("SWITCH", "DECISION"):
            labelled = [(k, v) for k, v in task.decision_cases.items()]
            labelled.append(("default", task.default_case))
        else:
            labelled = [(str(i), b) for i, b in enumerate(task.fork_tasks)]
        blocks: list[tuple[str, bool | None, _Block]] = []
        for label, tasks in labelled:
            took = None if chosen is None else (label == chosen)
            inner = taken if took is None else (took and taken is not False)
            blocks.append((label, took, self.sequence(tasks, inner)))
        width = max(
            NODE_W, sum(max(b.width, NODE_W // 2) for _, _, b in blocks) + GAP_X * (len(blocks) - 1)
        )
        nodes = [_moved(head, (width - NODE_W) // 2, 0)]
        edges: list[tuple[str, str, str, str]] = []
        exits: list[str] = []
        x = (
            width
            - (sum(max(b.width, NODE_W // 2) for _, _, b in blocks) + GAP_X * (len(blocks) - 1))
        ) // 2
        height = NODE_H
        for label, took, b in blocks:
            kind = "flow" if took is None else ("taken" if took else "skipped")
            shown = label if task.type in ("SWITCH", "DECISION") else ""
            nodes += [_moved(n, x, NODE_H + GAP_Y) for n in b.nodes]
            edges += [(head.ref, e, kind, shown) for e in b.entries] + b.edges
            exits += b.exits if b.nodes else ([head.ref] if took is not False else [])
            height = max(height, NODE_H + GAP_Y + b.height)
            x += max(b.width, NODE_W // 2) + GAP_X
        return _Block(nodes, edges, width, height, [head.ref], exits or [head.ref])

    def chosen_case(self, task: WorkflowTask, head: Node) -> str | None:
        """The case a finished switch took ("default" when no case matched), else None."""
        if task.type not in ("SWITCH", "DECISION") or head.state != "COMPLETED":
            return None
        output = self.rows[task.ref][-1].get("output") or {}
        key = "evaluationResult" if task.type == "SWITCH" else "caseOutput"
        case = str((output.get(key) or [""])[0])
        return case if case in task.decision_cases else "default"


def _moved(node: Node, dx: int, dy: int) -> Node:
    return Node(**{**node.__dict__, "x": node.x + dx, "y": node.y + dy})
