"""Every task type of the core, driven input by input."""

from __future__ import annotations

from datetime import timedelta

from es_sched.domain import commands as c
from es_sched.simulate import Simulation
from tests.unit.domain.harness import SCRIPTS, T0, Driver, task, workflow


def test_simple_chain_resolves_expressions_and_completes_with_output_parameters() -> None:
    d = Driver(
        workflow(
            task("probe", inputParameters={"uri": "${workflow.input.uri}"}),
            task(
                "encode",
                inputParameters={
                    "h": "${probe.output.height}",
                    "label": "h=${probe.output.height}p",
                },
            ),
            outputParameters={"height": "${probe.output.height}", "wf": "${workflow.workflowId}"},
        ),
        {"uri": "file:///a.mp4"},
    )
    assert d.latest("probe").input == {"uri": "file:///a.mp4"}
    d.report("probe", output={"height": 720})
    assert d.latest("encode").input == {"h": 720, "label": "h=720p"}
    d.report("encode")
    assert d.st.status == "COMPLETED"
    assert d.st.output == {"height": 720, "wf": "wf-1"}
    assert [e.seq for e in d.events] == list(range(1, len(d.events) + 1))


def _switch(evaluator: str, expression: str) -> dict[str, object]:
    return task(
        "sw",
        type_="SWITCH",
        evaluatorType=evaluator,
        expression=expression,
        inputParameters={"h": "${workflow.input.h}"},
        decisionCases={"big": [task("hd")], "true": [task("js_true")]},
        defaultCase=[task("sd")],
    )


def test_switch_value_param_picks_case_or_default() -> None:
    for h, ran in (("big", "hd"), ("other", "sd")):
        d = Driver(workflow(_switch("value-param", "h")), {"h": h})
        assert d.latest("sw").output == {"evaluationResult": [h], "selectedCase": h}
        assert d.st.instance(ran) is not None


def test_switch_javascript_boolean_selects_the_true_case() -> None:
    d = Driver(workflow(_switch("javascript", "$.h > 1000")), {"h": 1080})
    assert d.latest("sw").output["selectedCase"] == "true"
    assert d.st.instance("js_true") is not None


def test_switch_script_error_fails_the_task_and_workflow_not_the_process() -> None:
    d = Driver(workflow(_switch("javascript", "while (true) {}")), {"h": 1})
    assert d.latest("sw").status == "FAILED_WITH_TERMINAL_ERROR"
    assert "time limit" in d.latest("sw").reason
    assert d.st.status == "FAILED"


def test_inline_result_and_memory_limit() -> None:
    ok = Driver(
        workflow(
            task(
                "calc",
                type_="INLINE",
                inputParameters={
                    "evaluatorType": "javascript",
                    "a": 2,
                    "expression": "(function(){ return {v: $.a * 21}; })()",
                },
            )
        )
    )
    assert ok.latest("calc").output == {"result": {"v": 42}}
    bomb = Driver(
        workflow(
            task(
                "calc",
                type_="INLINE",
                inputParameters={
                    "evaluatorType": "javascript",
                    "expression": "var a = []; while (true) a.push(new Array(1e5).fill(1));",
                },
            )
        )
    )
    assert "memory limit" in bomb.latest("calc").reason
    assert bomb.st.status == "FAILED"


def test_fork_join_runs_branches_in_parallel_and_joins_outputs() -> None:
    d = Driver(
        workflow(
            task("fork", type_="FORK_JOIN", forkTasks=[[task("a1"), task("a2")], [task("b1")]]),
            task("join", type_="JOIN", joinOn=["a2", "b1"]),
            task("after"),
        )
    )
    assert {"a1", "b1"} <= set(d.st.latest) and d.st.instance("a2") is None
    d.report("b1", output={"b": 1})
    d.report("a1")
    assert d.latest("join").status == "IN_PROGRESS"
    d.report("a2", output={"a": 2})
    assert d.latest("join").output == {"a2": {"a": 2}, "b1": {"b": 1}}
    d.report("after")
    assert d.st.status == "COMPLETED"


def test_dynamic_fork_of_a_thousand_branches() -> None:
    refs = [f"r{i}" for i in range(1000)]
    d = Driver(
        workflow(
            task(
                "dyn",
                type_="FORK_JOIN_DYNAMIC",
                dynamicForkTasksParam="tasks",
                dynamicForkTasksInputParamName="inputs",
                inputParameters={
                    "tasks": "${workflow.input.tasks}",
                    "inputs": "${workflow.input.inputs}",
                },
            ),
            task("join", type_="JOIN"),
        ),
        {
            "tasks": [{"name": "render", "taskReferenceName": r} for r in refs],
            "inputs": {r: {"frame": i} for i, r in enumerate(refs)},
        },
    )
    assert d.latest("r999").input == {"frame": 999}
    assert d.latest("join").input["joinOn"] == refs
    for i, r in enumerate(refs):
        d.report(r, output={"frame": i} if i % 2 else {})
    assert d.st.status == "COMPLETED"
    assert len(d.latest("join").output) == 500  # empty outputs are left out, as in Conductor


def test_fork_inside_switch_inside_do_while() -> None:
    body = [
        task(
            "pick",
            type_="SWITCH",
            evaluatorType="javascript",
            expression="$.i % 2 == 1 ? 'odd' : 'even'",
            inputParameters={"i": "${loop.output.iteration}"},
            decisionCases={
                "odd": [
                    task("fork", type_="FORK_JOIN", forkTasks=[[task("x")], [task("y")]]),
                    task("join", type_="JOIN", joinOn=["x", "y"]),
                ]
            },
            defaultCase=[task("z")],
        ),
    ]
    d = Driver(
        workflow(
            task("loop", type_="DO_WHILE", loopCondition="$.loop['iteration'] < 3", loopOver=body)
        )
    )
    for ref in ("x__1", "y__1", "z__2", "x__3", "y__3"):
        d.report(ref)
    assert d.st.status == "COMPLETED"
    assert d.latest("loop").output["iteration"] == 3
    assert [r[0] for r in d.rows()][:6] == ["loop", "pick__1", "fork__1", "x__1", "y__1", "join__1"]
    assert d.latest("join__3").input["joinOn"] == ["x", "y"]


def test_set_variable_and_terminate() -> None:
    d = Driver(
        workflow(
            task("vars", type_="SET_VARIABLE", inputParameters={"stage": "encoded"}),
            task(
                "stop",
                type_="TERMINATE",
                inputParameters={
                    "terminationStatus": "COMPLETED",
                    "workflowOutput": {"stage": "${workflow.variables.stage}"},
                },
            ),
            task("never"),
        )
    )
    assert d.st.variables == {"stage": "encoded"}
    assert (d.st.status, d.st.output) == ("COMPLETED", {"stage": "encoded"})
    assert d.st.instance("never") is None


def test_wait_duration_until_and_signal() -> None:
    d = Driver(
        workflow(
            task("nap", type_="WAIT", inputParameters={"duration": "1h 30m"}),
            task("gate", type_="WAIT"),
            task("until", type_="WAIT", inputParameters={"until": "2026-03-01 16:00 UTC"}),
        )
    )
    assert d.latest("nap").wait_until == T0 + timedelta(minutes=90)
    assert d.fire("wait", "nap") == []  # too early: ignored
    d.advance(5400)
    d.fire("wait", "nap")
    assert d.latest("gate").status == "IN_PROGRESS"
    d.send(c.SignalWorkflow("sig-1", "wf-1", ref="gate", output={"ok": True}))
    assert d.latest("gate").output == {"ok": True}
    assert d.latest("until").wait_until == T0.replace(hour=16)
    d.advance(3600)  # 14:30: still before 16:00
    assert d.fire("wait", "until") == []
    d.advance(5400)
    d.fire("wait", "until")
    assert d.st.status == "COMPLETED"


def test_signal_without_a_waiting_task_is_rejected_in_the_history() -> None:
    d = Driver(workflow(task("a")))
    events = d.send(c.SignalWorkflow("sig-1", "wf-1", output={}))
    assert d.types(events) == ["command.rejected"]
    assert "no WAIT task" in events[0].payload.reason  # type: ignore[attr-defined]


CHILD = workflow(task("c1"), task("c2"), name="child", outputParameters={"v": "${c2.output.v}"})


def test_sub_workflow_output_and_failure_propagation() -> None:
    parent = workflow(
        task("sub", type_="SUB_WORKFLOW", subWorkflowParam={"name": "child"}), name="parent"
    )
    ok = Simulation(
        [parent, CHILD],
        script=[{"ref": "c2", "in_subworkflow_of": "sub", "output": {"v": 7}}],
        scripts=SCRIPTS,
    ).run(parent, {})
    assert ok["status"] == "COMPLETED" and ok["output"]["v"] == 7
    bad = Simulation(
        [parent, CHILD],
        script=[{"ref": "c1", "in_subworkflow_of": "sub", "status": "FAILED"}],
        scripts=SCRIPTS,
    ).run(parent, {})
    assert bad["status"] == "FAILED"
    assert bad["subworkflows"]["sub"]["status"] == "FAILED"
    assert "sub-workflow" in bad["reasonForIncompletion"]


def test_start_workflow_is_fire_and_forget() -> None:
    wf = workflow(
        task(
            "kick",
            type_="START_WORKFLOW",
            inputParameters={"startWorkflow": {"name": "child", "input": {"x": 1}}},
        ),
        task("after"),
    )
    d = Driver(wf)
    started = [e for e in d.events if e.type == "workflow.start_requested"]
    assert started and started[0].payload.name == "child"  # type: ignore[attr-defined]
    assert d.latest("kick").output == {"workflowId": started[0].payload.child_workflow_id}  # type: ignore[attr-defined]
    assert d.st.instance("after") is not None


def test_callback_runs_on_failure_only() -> None:
    wf = workflow(
        task("a"),
        task(
            "cb",
            name="notify",
            type_="CALLBACK",
            inputParameters={
                "status": "${workflow.status}",
                "why": "${workflow.reasonForIncompletion}",
            },
        ),
    )
    good = Driver(wf)
    good.report("a")
    assert good.st.status == "COMPLETED" and good.st.instance("cb") is None
    bad = Driver(wf)
    bad.report("a", "FAILED", reason="disk full")
    assert bad.st.status == "RUNNING" and bad.st.ending == "FAILED"
    assert bad.latest("cb").input == {"status": "FAILED", "why": "task 'a' failed: disk full"}
    bad.report("cb")
    assert bad.st.status == "FAILED"
    assert bad.types()[-1] == "workflow.ended"
