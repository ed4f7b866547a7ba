"""Golden histories: the recorder of the event streams and the state they must fold to (the
tests read them through ``testkit.golden``).

``python -m tests.unit.domain.golden`` records them again from the simulator (review the diff
before committing: a change here means the meaning of stored history changed). The
``media_1080_v1`` history is written with ``task.scheduled`` at schema_version 1, as an older
es-sched wrote it, so the replay test also exercises the upcaster.
"""

from __future__ import annotations

import json
from typing import Any

from es_sched.domain import commands as c
from es_sched.domain.state import WorkflowState
from es_sched.scripting.quickjs import QuickJsEngine
from es_sched.serialization import event_to_dict
from es_sched.simulate import Simulation
from testkit import ROOT
from testkit.golden import GOLDEN

MEDIA_INPUT = {"source_uri": "file:///in/match.mp4", "asset_id": "a-1", "callback_url": "http://cb"}


def _media(
    script: list[dict[str, Any]],
) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]]:
    media = json.loads((ROOT / "examples" / "media_pipeline.json").read_text())
    taskdefs = json.loads((ROOT / "examples" / "media_taskdefs.json").read_text())
    return media, taskdefs, script, MEDIA_INPUT


CASES: dict[
    str, tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]]
] = {
    "media_1080_v1": _media([{"ref": "probe", "output": {"height": 1080, "duration": 8.0}}]),
    "media_480": _media([{"ref": "probe", "output": {"height": 480, "duration": 3.5}}]),
    "media_transcode_exhausted": _media(
        [{"ref": "probe", "output": {"height": 720, "duration": 5.0}}]
        + [
            {"ref": "transcode_720p_only", "status": "FAILED", "reason": f"encoder crash {i}"}
            for i in range(4)
        ]
    ),
    # the exhausted run, then an operator reruns it from the failed transcode (ADR 27)
    "media_transcode_rerun": _media(
        [{"ref": "probe", "output": {"height": 720, "duration": 5.0}}]
        + [
            {"ref": "transcode_720p_only", "status": "FAILED", "reason": f"encoder crash {i}"}
            for i in range(4)
        ]
    ),
}
AFTER: dict[str, c.Command] = {
    "media_transcode_rerun": c.RerunWorkflow(
        "rerun-ops-1", "wf-1", task="transcode_720p_only", actor="cli:ops"
    ),
}


def summary(st: WorkflowState) -> dict[str, Any]:
    return {
        "status": st.status,
        "seq": st.seq,
        "reason": st.reason,
        "output": st.output,
        "variables": st.variables,
        "tasks": [
            [t.ref, t.task_type, t.status, t.attempt, t.output]
            for t in sorted(st.tasks.values(), key=lambda t: t.order)
        ],
    }


def _as_v1(doc: dict[str, Any]) -> dict[str, Any]:
    if doc["type"] == "task.scheduled":
        doc["schema_version"] = 1
        doc["payload"] = {
            k: v for k, v in doc["payload"].items() if k not in ("rate_limit_key", "callback")
        }
    return doc


def record() -> None:
    for name, (definition, taskdefs, script, inp) in CASES.items():
        sim = Simulation([definition], taskdefs, script, scripts=QuickJsEngine())
        sim.run(definition, inp)
        if name in AFTER:
            sim.act(AFTER[name])
        wf = sim.workflows["wf-1"]
        assert wf.state is not None
        docs = [event_to_dict(e) for e in wf.events]
        if name.endswith("_v1"):
            docs = [_as_v1(d) for d in docs]
        lines = "".join(json.dumps(d, sort_keys=True) + "\n" for d in docs)
        (GOLDEN / f"{name}.events.jsonl").write_text(lines)
        (GOLDEN / f"{name}.expected.json").write_text(
            json.dumps(summary(wf.state), indent=2) + "\n"
        )


if __name__ == "__main__":
    record()
