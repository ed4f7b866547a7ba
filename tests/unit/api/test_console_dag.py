"""The console's DAG layout: positions, states, switch branches, forks, loops, sub-workflows."""

from __future__ import annotations

from typing import Any

from es_sched.api.ui.dag import NODE_H, NODE_W, NOT_STARTED, Node, layout


def simple(ref: str, ttype: str = "SIMPLE", **more: Any) -> dict[str, Any]:
    return {"name": ref, "taskReferenceName": ref, "type": ttype, **more}


def definition(*tasks: dict[str, Any]) -> dict[str, Any]:
    return {"name": "wf", "version": 1, "schemaVersion": 2, "tasks": list(tasks)}


def row(
    ref: str, status: str, attempt: int = 1, iteration: int = 0, **output: Any
) -> dict[str, Any]:
    return {
        "ref": ref,
        "status": status,
        "attempt": attempt,
        "iteration": iteration,
        "output": output,
    }


def overlap(a: Node, b: Node) -> bool:
    return a.x < b.x + NODE_W and b.x < a.x + NODE_W and a.y < b.y + NODE_H and b.y < a.y + NODE_H


def test_a_sequence_stacks_top_down_coloured_by_the_latest_attempt() -> None:
    lay = layout(
        definition(simple("a"), simple("b"), simple("c")),
        [row("a", "FAILED", 1), row("a", "COMPLETED", 2), row("b", "IN_PROGRESS")],
    )
    a, b, c = (lay.node(r) for r in "abc")
    assert (a.state, b.state, c.state) == ("COMPLETED", "IN_PROGRESS", NOT_STARTED)
    assert a.attempts == 2 and a.y < b.y < c.y and a.x == b.x == c.x
    assert [(e.source, e.target) for e in lay.edges] == [("a", "b"), ("b", "c")]
    assert lay.width >= NODE_W and lay.height >= 3 * NODE_H


def test_a_switch_marks_the_branch_it_took() -> None:
    sw = simple(
        "sw",
        "SWITCH",
        evaluatorType="value-param",
        expression="k",
        decisionCases={"x": [simple("x1")], "y": [simple("y1")]},
        defaultCase=[simple("d1")],
    )
    lay = layout(
        definition(sw, simple("after")),
        [row("sw", "COMPLETED", evaluationResult=["y"], selectedCase="y")],
    )
    kinds = {e.target: (e.kind, e.label) for e in lay.edges if e.source == "sw"}
    assert kinds == {"x1": ("skipped", "x"), "y1": ("taken", "y"), "d1": ("skipped", "default")}
    assert lay.node("y1").taken is True and lay.node("x1").taken is False
    # Every branch joins the next task; branches sit side by side without overlapping.
    assert {e.source for e in lay.edges if e.target == "after"} == {"x1", "y1", "d1"}
    nodes = lay.nodes
    assert not any(overlap(p, q) for i, p in enumerate(nodes) for q in nodes[i + 1 :])


def test_a_fork_puts_branches_side_by_side_and_the_join_under_them() -> None:
    fork = simple("f", "FORK_JOIN", forkTasks=[[simple("l1"), simple("l2")], [simple("r1")]])
    lay = layout(definition(fork, simple("j", "JOIN", joinOn=["l2", "r1"])), [])
    l1, r1, j = lay.node("l1"), lay.node("r1"), lay.node("j")
    assert l1.y == r1.y and l1.x != r1.x and j.y > lay.node("l2").y
    assert {(e.source, e.target) for e in lay.edges} >= {
        ("f", "l1"),
        ("f", "r1"),
        ("l2", "j"),
        ("r1", "j"),
    }


def test_a_loop_counts_iterations_and_draws_an_edge_back() -> None:
    loop = simple("loop", "DO_WHILE", loopCondition="false", loopOver=[simple("body")])
    lay = layout(
        definition(loop),
        [row("body__1", "COMPLETED", iteration=1), row("body__2", "FAILED", iteration=2)],
    )
    body = lay.node("body")
    assert (body.state, body.iterations, body.attempts) == ("FAILED", 2, 2)
    back = [e for e in lay.edges if e.kind == "loop"]
    assert [(e.source, e.target) for e in back] == [("body", "loop")] and len(back[0].points) == 4


def test_a_sub_workflow_links_to_its_child() -> None:
    sub = simple("sub", "SUB_WORKFLOW", subWorkflowParam={"name": "child", "version": 1})
    lay = layout(definition(sub), [row("sub", "IN_PROGRESS", subWorkflowId="child-1")])
    assert lay.node("sub").child_workflow_id == "child-1"


def test_an_unparseable_definition_is_reported_not_raised() -> None:
    lay = layout({"name": "wf", "tasks": "nope"}, [])
    assert lay.nodes == [] and lay.problems
