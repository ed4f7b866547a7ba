"""Dynamic timeouts end to end (ADR 64, 65): real Kafka, and the decider, dispatcher, timer
service and analytics role as processes, with a worker of the es-sched SDK in this process.
Nothing stands in for the analytics role: the timeouts come from what it learned of the runs.

One task type, ``render.clip``, asks for a dynamic timeout (P95 x 1.2, floor 1 s, ceiling
3600 s, 5 samples at least) over a static ``timeoutSeconds`` of an hour; each workflow is one
such task, and the analytics windows are 15 s long. Its run time shifts from 0.5 s to 2.5 s
(the seed's 2 s -> 10 s, scaled down by 4), in batches of 6 tasks run side by side:

1. before the role has 5 runs in the window, each task gets the static hour (``static``);
2. then P95 0.5 s x 1.2, clamped to the 1 s floor (``learned``; the run time measured from
   the worker's start report to its completion is a little over what the handler sleeps);
3. the run time shifts to 2.5 s: the tasks scheduled under the ~1 s figure are cut by it, and
   within the window they were cut in the decider falls back to the static hour for the rest
   of the type's tasks (``censored``: too many runs cut for the P95 to be known,
   ``timeouts.censored``), so the slow runs complete and are measured;
4. in a window without cut runs the figure is P95 2.5 s x 1.2 = 3 s, and a stuck task is
   timed out near 3 s, not at the hour.

Each phase ends on facts (the timeouts the next batch's ``task.scheduled`` events recorded),
never on time. The timeline (run time, timeout used and its source per task) is printed and
written beside the role logs; ``bench/results/current/dynamic_timeouts_timeline.md`` is one
run of it. The audit (I5) over the whole log ends the test: deciding the recorded inputs
again, from the figures the events recorded, gives the recorded events.
"""

from __future__ import annotations

import json
import math
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from es_sched import bootstrap
from es_sched.audit.check import check
from es_sched.audit.read import read_log
from es_sched.domain.events import Event, TaskScheduled, TaskTimedOut
from es_sched.workers import TaskContext
from testkit.runtime import Env, final_status, read_events, roles
from testkit.wait import wait_until
from tests.integration.worker_harness import Running, make_worker

pytestmark = pytest.mark.integration
JSON = dict[str, Any]
WINDOW_S = 15.0
BATCH = 6
FAST = {
    "ES_SCHED_DISPATCH_HEARTBEAT_S": "0.5",
    "ES_SCHED_DISPATCH_LEASE_K": "4",
    "ES_SCHED_DISPATCH_TICK_MS": "50",
    "ES_SCHED_ANALYTICS_WINDOW_S": str(WINDOW_S),
    "ES_SCHED_ANALYTICS_PUBLISH_INTERVAL_S": "0.5",
}
TYPE = "render.clip"
TASKDEF = {
    "name": TYPE,
    "retryCount": 0,
    "timeoutSeconds": 3600,  # the static hour
    "responseTimeoutSeconds": 3600,
    "timeoutPolicy": "TIME_OUT_WF",
    "dynamicTimeout": {"floorSeconds": 1, "ceilingSeconds": 3600, "minSamples": 5},
}
FLOW = {
    "name": "flow.render",
    "version": 1,
    "tasks": [
        {
            "name": TYPE,
            "taskReferenceName": "render",
            "inputParameters": {
                "run_s": "${workflow.input.run_s}",
                "stuck": "${workflow.input.stuck}",
            },
        }
    ],
}


def window_end(at: datetime) -> float:
    """The end of the analytics window an event time falls in (``analytics.window_start``)."""
    return (math.floor(at.timestamp() / WINDOW_S) + 1) * WINDOW_S


@dataclass
class System:
    env: Env
    release: threading.Event
    released: set[str]
    timeline: list[JSON] = field(default_factory=list)
    batches: int = 0

    def batch(self, run_s: float, n: int = BATCH) -> list[JSON]:
        """``n`` tasks of ``run_s`` started together: each one's recorded timeout and end."""
        self.batches += 1
        started = self.env.submit("flow.render", [{"run_s": run_s, "stuck": ""}] * n)
        ids = [s.workflow_id for s in started]
        found: dict[str, list[Event]] = {}

        def ended() -> bool:
            found.update(read_events(self.env))
            return all(final_status(found.get(wf, [])) != "RUNNING" for wf in ids)

        wait_until(ended, 90, f"the end of batch {self.batches} ({n} x {run_s} s)")
        rows = [self._row(found[wf], run_s, False) for wf in ids]
        self.timeline.extend(rows)
        return rows

    def _row(self, events: list[Event], run_s: float, stuck: bool) -> JSON:
        scheduled = next(e for e in events if isinstance(e.payload, TaskScheduled))
        started = next(e for e in events if e.type == "task.started")
        ended = next(e for e in events if e.type in ("task.completed", "task.timed_out"))
        assert isinstance(scheduled.payload, TaskScheduled)
        return {
            "batch": self.batches,
            "workflow": events[0].workflow_id,
            "run_s": "stuck" if stuck else run_s,
            "timeout": scheduled.payload.timeout,
            "outcome": ended.type,
            "ended_at": ended.occurred_at,
            "ended_after_s": round((ended.occurred_at - started.occurred_at).total_seconds(), 3),
            "kind": ended.payload.kind if isinstance(ended.payload, TaskTimedOut) else None,
            "workflow_status": final_status(events),
        }

    def stuck(self) -> JSON:
        """One task that never ends by itself, run under a learned figure: one scheduled as
        a new window began (its first runs under the minimum: the static hour) is let go
        and another is started."""
        found: list[JSON] = []

        def hung_and_cut() -> bool:
            token = uuid.uuid4().hex
            [wf] = [s.workflow_id for s in self.env.submit("flow.render", [{"stuck": token}])]
            events: list[Event] = []

            def scheduled() -> bool:
                events[:] = read_events(self.env).get(wf, [])
                return any(isinstance(e.payload, TaskScheduled) for e in events)

            wait_until(scheduled, 30, f"{wf} scheduled")
            timeout = next(e.payload for e in events if isinstance(e.payload, TaskScheduled))
            if timeout.timeout.get("source") != "learned":
                self.released.add(token)
            wait_until(
                lambda: final_status(read_events(self.env).get(wf, [])) != "RUNNING",
                90,
                f"the end of the stuck task's {wf}",
            )
            self.batches += 1
            found[:] = [self._row(read_events(self.env)[wf], 0.0, True)]
            self.timeline.extend(found)
            return bool(found[0]["timeout"].get("source") == "learned")

        wait_until(hung_and_cut, 180, "a stuck task cut by a learned figure")
        return found[0]

    def until(self, run_s: float, wanted: Callable[[JSON], bool], what: str) -> JSON:
        """Batches of ``run_s`` until one of their tasks recorded a timeout ``wanted``."""
        hit: list[JSON] = []

        def seen() -> bool:
            hit[:] = [row for row in self.batch(run_s) if wanted(row["timeout"])]
            return bool(hit)

        def described() -> str:
            last = self.timeline[-1] if self.timeline else {}
            return f"{what}; the last task: {last.get('timeout')} at {time.time():.1f}"

        wait_until(seen, 180, described)
        return hit[0]


# Function scope: the roles stop before testkit's ``delete_new_topics`` removes the topics the
# analytics role made after the test began (faust's internal topics); a module-scoped role
# outlives that cleanup and its faust app cannot stop without them.
@pytest.fixture
def system() -> Iterator[System]:
    env = Env(extra=dict(FAST))
    env.create()
    env.push(FLOW, [TASKDEF])
    release, released = threading.Event(), set[str]()
    worker = make_worker(env.settings, concurrency=BATCH)

    @worker.task(TYPE)
    def render(ctx: TaskContext, task_input: JSON) -> JSON:
        token = task_input.get("stuck")
        if token:  # hangs until its lease is taken back, it is let go, or the test ends
            while not ctx.cancelled and token not in released and not release.wait(0.1):
                pass
            return {}
        # the clip's render time; a run cut by its timeout is told so and stops
        deadline = time.monotonic() + float(task_input["run_s"])
        while not ctx.cancelled and time.monotonic() < deadline:
            release.wait(min(0.05, max(0.0, deadline - time.monotonic())))
        return {"rendered_s": task_input["run_s"]}

    with roles(env, "decider", "dispatcher", "timers", "analytics", **FAST), Running(worker):
        try:
            yield System(env, release, released)
        finally:
            release.set()


def left_in_window(timeout: JSON) -> float:
    """Seconds left in the window a recorded figure came from, by this machine's clock."""
    return datetime.fromisoformat(timeout["window_end"]).timestamp() - time.time()


def shift(system: System, attempts: int = 3) -> tuple[list[JSON], JSON]:
    """The run time shifts from 0.5 s to 2.5 s while the learned figure holds: the tasks cut
    by it, and the first one of the same window given the static hour for runs cut.

    The shift starts in a window with time left for the cut batch and the next one (fast
    batches run until the figure is of such a window); if the window ends under them anyway
    (a slow machine), the next window's first runs take the static hour for too few samples
    instead, which shows nothing, and the shift is tried again in a later window."""
    for _ in range(attempts):
        system.until(
            0.5,
            lambda t: t["source"] == "learned" and t["run_s"] < 2.0 and left_in_window(t) > 5,
            "a fast figure learned early in a window",
        )
        were_cut = [r for r in system.batch(2.5) if r["outcome"] == "task.timed_out"]
        raised = [r for r in system.batch(2.5) if r["timeout"].get("censored")]
        if were_cut and raised:
            return were_cut, raised[0]
    pytest.fail(f"no window showed the shift in {attempts} attempts: {system.timeline}")


def _table(timeline: list[JSON]) -> str:
    lines = [
        "# Dynamic timeouts: one run of tests/integration/test_dynamic_timeouts.py",
        "",
        "`render.clip`: dynamicTimeout P95 x 1.2 in [1 s, 3600 s], 5 samples at least, over a",
        "static timeoutSeconds of 3600; the figures are the analytics role's, over 15 s windows.",
        "Run time: what the worker's handler was asked to take; timeout used: the `timeout` its",
        "task.scheduled recorded (static with runs cut: the window had too many runs cut by",
        "their timeout for its P95 to be known); ended after: task.started to its end, by the",
        "events' times. One row per batch of tasks started together with the same figure.",
        "",
        "| batch | tasks | run time | timeout used | source | samples | runs cut | window end"
        " | outcome | ended after |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    groups: dict[tuple[Any, ...], list[JSON]] = {}
    for row in timeline:
        t = row["timeout"]
        key = (row["batch"], row["run_s"], json.dumps(t, sort_keys=True), row["outcome"])
        groups.setdefault(key, []).append(row)
    for (batch, run_s, _, outcome), rows in groups.items():
        t = rows[0]["timeout"]
        run = run_s if run_s == "stuck" else f"{run_s} s"
        kind = f" ({rows[0]['kind']})" if rows[0]["kind"] else ""
        after = sorted(r["ended_after_s"] for r in rows)
        spread = f"{after[0]} s" if len(after) == 1 else f"{after[0]}-{after[-1]} s"
        end = str(t.get("window_end", ""))[11:19]
        lines.append(
            f"| {batch} | {len(rows)} | {run} | {t['timeout_seconds']} s | {t['source']} | "
            f"{t['samples']} | {t.get('censored', '')} | {end} | {outcome}{kind} | {spread} |"
        )
    return "\n".join(lines) + "\n"


def test_timeouts_follow_the_learned_run_times_and_a_stuck_task_is_found(
    system: System,
) -> None:
    # 1. nothing learned yet: the static hour
    [first, *_] = system.batch(0.5)
    assert (first["timeout"]["source"], first["timeout"]["timeout_seconds"]) == ("static", 3600)
    assert first["outcome"] == "task.completed"

    # 2. P95 0.5 s x 1.2 = 0.6 s, clamped to the 1 s floor
    short = system.until(0.5, lambda t: t["source"] == "learned", "a learned timeout")
    assert short["timeout"]["samples"] >= 5 and 0.4 <= short["timeout"]["run_s"] < 2.0
    assert short["timeout"]["timeout_seconds"] == max(
        1.0, round(short["timeout"]["run_s"] * 1.2, 3)
    )

    # 3. the run time shifts to 2.5 s: the ~1 s figure cuts the first slow runs, and in the
    # window they were cut in the type falls back to its static hour (too many runs cut)
    were_cut, raised = shift(system)
    assert all(r["timeout"]["source"] == "learned" for r in were_cut)
    assert all(r["ended_after_s"] < 2.5 and r["kind"] == "total" for r in were_cut)
    first_cut = min(r["ended_at"] for r in were_cut)
    assert raised["timeout"]["source"] == "static"
    assert raised["timeout"]["timeout_seconds"] == 3600 and raised["outcome"] == "task.completed"
    raised_in = datetime.fromisoformat(raised["timeout"]["window_end"]).timestamp()
    assert raised_in == window_end(first_cut), (raised, first_cut)  # within that window

    # 4. a window without cut runs learns the new figure: P95 2.5 s x 1.2 = 3 s
    learned = system.until(2.5, lambda t: t["source"] == "learned", "the new figure learned")
    assert 2.4 <= learned["timeout"]["run_s"] < 5.0
    assert learned["timeout"]["timeout_seconds"] == round(learned["timeout"]["run_s"] * 1.2, 3)
    assert datetime.fromisoformat(learned["timeout"]["window_end"]).timestamp() > raised_in

    stuck = system.stuck()
    assert (stuck["outcome"], stuck["kind"], stuck["workflow_status"]) == (
        "task.timed_out",
        "total",
        "TIMED_OUT",
    )
    # cut by its recorded figure (the decider checks it is due), not by the static hour
    figure = stuck["timeout"]["timeout_seconds"]
    assert figure >= 2.5 and figure - 0.1 <= stuck["ended_after_s"] < 60

    table = _table(system.timeline)
    out = Path(tempfile.gettempdir()) / "es-sched-test-roles" / "dynamic_timeouts_timeline"
    out.parent.mkdir(exist_ok=True)
    out.with_suffix(".md").write_text(table)
    rows = [{k: v for k, v in r.items() if k != "ended_at"} for r in system.timeline]
    out.with_suffix(".json").write_text(json.dumps(rows, indent=2) + "\n")
    print(f"\n{table}")  # the timeline the issue asks to show

    report = check(read_log(system.env.settings), False, bootstrap.script_engine())
    assert report.ok, "\n".join(v.line() for v in report.violations[:20])
    assert {first["workflow"], stuck["workflow"]} <= set(report.states)
