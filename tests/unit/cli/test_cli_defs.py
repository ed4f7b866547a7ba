"""``es-sched defs validate|simulate`` driven in a subprocess, as a user runs them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from es_sched.scripting.quickjs import QuickJsEngine
from es_sched.simulate import Simulation
from testkit import ROOT

EXAMPLES = (
    "examples/media_pipeline.json",
    "examples/media_taskdefs.json",
    "examples/editorial_review.json",
    "examples/clip_highlights.json",
)
MEDIA = ("examples/media_pipeline.json", "--taskdefs", "examples/media_taskdefs.json")
MEDIA_INPUT = {"source_uri": "s3://in/match.mp4", "asset_id": "a1", "callback_url": "http://cb"}
SMALL = {
    "name": "small",
    "version": 1,
    "tasks": [
        {
            "name": "a",
            "taskReferenceName": "a",
            "type": "SIMPLE",
            "inputParameters": {"x": "${workflow.input.x}"},
        }
    ],
    "outputParameters": {"a": "${a.output}"},
}


def defs(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "es_sched", "defs", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def flat(text: str) -> str:
    """Rich wraps long lines at 120 columns when not on a terminal; undo that for searching."""
    return " ".join(text.split())


def simulate(
    tmp_path: Path, paths: tuple[str, ...], inp: dict[str, Any], script: list[dict[str, Any]]
) -> dict[str, Any]:
    script_path = tmp_path / "script.json"
    script_path.write_text(json.dumps(script))
    res = defs(
        "simulate", *paths, "--input", json.dumps(inp), "--script", str(script_path), "--json"
    )
    assert res.returncode == 0, res.stderr
    result: dict[str, Any] = json.loads(res.stdout)
    check_shape(result)
    return result


def check_shape(result: dict[str, Any]) -> None:
    assert {"status", "output", "tasks", "subworkflows"} <= result.keys()
    assert isinstance(result["output"], dict)
    for row in result["tasks"]:
        assert {"taskReferenceName", "taskType", "status", "attempt"} <= row.keys()
        assert isinstance(row["attempt"], int)
    for child in result["subworkflows"].values():
        check_shape(child)


def by_ref(result: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for row in result["tasks"]:
        out.setdefault(row["taskReferenceName"], []).append(row)
    return out


def status_of(result: dict[str, Any]) -> dict[str, str]:
    """The newest attempt's status of every task reference."""
    return {ref: rows[-1]["status"] for ref, rows in by_ref(result).items()}


# -- validate -----------------------------------------------------------------------------------
def test_validate_examples() -> None:
    res = defs("validate", *EXAMPLES)
    assert res.returncode == 0, res.stdout + res.stderr
    lines = res.stdout.splitlines()
    for name in ("media_pipeline", "editorial_review", "clip_highlights"):
        assert any(line.startswith(f"valid {name} v1") for line in lines), res.stdout
    assert "invalid" not in res.stdout


def test_validate_examples_json() -> None:
    res = defs("validate", "--json", *EXAMPLES)
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout)
    assert report["valid"] is True
    assert len(report["problems"]) == 3
    assert all(problems == [] for problems in report["problems"].values())


def test_validate_broken_definition_lists_every_problem_with_its_task(tmp_path: Path) -> None:
    broken = tmp_path / "broken.json"
    broken.write_text(
        json.dumps(
            {
                "name": "broken",
                "version": 1,
                "tasks": [
                    {
                        "name": "a",
                        "taskReferenceName": "a",
                        "type": "SIMPLE",
                        "inputParameters": {"x": "${ghost.output.y}"},
                    },
                    {"name": "j", "taskReferenceName": "j", "type": "JOIN", "joinOn": ["a"]},
                ],
            }
        )
    )
    res = defs("validate", str(broken))
    assert res.returncode == 1
    out = flat(res.stdout)
    assert "invalid broken v1" in out
    assert "- task 'a': inputParameters refers to unknown task 'ghost'" in out
    assert "- task 'j': a JOIN must come right after a FORK_JOIN" in out
    assert "Traceback" not in res.stderr

    res = defs("validate", "--json", str(broken))
    assert res.returncode == 1
    report = json.loads(res.stdout)
    assert report["valid"] is False
    [problems] = report["problems"].values()
    assert len(problems) == 2


def test_validate_yaml_definition(tmp_path: Path) -> None:
    (tmp_path / "small.json").write_text(json.dumps(SMALL))
    (tmp_path / "small.yaml").write_text(yaml.safe_dump(SMALL, sort_keys=False))
    for name in ("small.json", "small.yaml"):
        res = defs("validate", str(tmp_path / name))
        assert res.returncode == 0, res.stdout + res.stderr
        assert flat(res.stdout).startswith(f"valid small v1 ({tmp_path / name})")
    from_yaml = simulate(tmp_path, (str(tmp_path / "small.yaml"),), {"x": 1}, [])
    from_json = simulate(tmp_path, (str(tmp_path / "small.json"),), {"x": 1}, [])
    assert from_yaml["status"] == from_json["status"] == "COMPLETED"
    assert from_yaml["tasks"] == from_json["tasks"]


def test_validate_file_that_is_not_json(tmp_path: Path) -> None:
    bad = tmp_path / "notjson.json"
    bad.write_text('{"name": "x", tasks')
    res = defs("validate", str(bad))
    assert res.returncode == 1
    assert "Traceback" not in res.stderr
    assert f"{bad}: not valid JSON" in flat(res.stderr)


# -- simulate: media_pipeline -------------------------------------------------------------------
def test_simulate_1080p_source_transcodes_four_renditions_and_packages_them(
    tmp_path: Path,
) -> None:
    script = [{"ref": "probe", "output": {"height": 1080, "duration": 6}}]
    result = simulate(tmp_path, MEDIA, MEDIA_INPUT, script)
    assert result["status"] == "COMPLETED"
    st = status_of(result)
    transcodes = ("transcode_1080p", "transcode_720p", "transcode_720p_h265", "transcode_480p")
    for ref in (*transcodes, "join_1080", "package", "write_asset", "notify_done"):
        assert st[ref] == "COMPLETED"
    assert sorted(
        r["taskReferenceName"] for r in result["tasks"] if r["taskType"] == "media.transcode"
    ) == sorted(transcodes)
    assert result["output"]["ladder"] == "1080"
    assert result["output"]["height"] == 1080
    assert "notify_failure" not in st  # the CALLBACK runs only on another ending
    assert result["subworkflows"] == {}


def test_simulate_480p_source_transcodes_only_480p(tmp_path: Path) -> None:
    script = [{"ref": "probe", "output": {"height": 480, "duration": 6}}]
    result = simulate(tmp_path, MEDIA, MEDIA_INPUT, script)
    assert result["status"] == "COMPLETED"
    transcodes = [
        r["taskReferenceName"] for r in result["tasks"] if r["taskType"] == "media.transcode"
    ]
    assert transcodes == ["transcode_480p_only"]
    assert status_of(result)["transcode_480p_only"] == "COMPLETED"
    assert result["output"]["ladder"] == "480"


# transcode_720p fails every attempt (retryCount 3: four attempts in all). transcode_480p fails
# twice, then its third attempt stays with the worker: it starts after at most 10 s + 20 s of
# retry delay and would time out 60 s later, while 720p exhausts its retries within 70 s.
FAILING: list[dict[str, Any]] = [
    {"ref": "probe", "output": {"height": 1080, "duration": 6}},
    *[{"ref": "transcode_720p", "status": "FAILED", "reason": "ffmpeg crashed"}] * 4,
    {"ref": "transcode_480p", "attempt": 1, "status": "FAILED", "reason": "disk full"},
    {"ref": "transcode_480p", "attempt": 2, "status": "FAILED", "reason": "disk full"},
    {"ref": "transcode_480p", "attempt": 3, "status": "IN_PROGRESS"},
]


def test_simulate_transcode_failing_four_times_fails_the_workflow(tmp_path: Path) -> None:
    result = simulate(tmp_path, MEDIA, MEDIA_INPUT, FAILING)
    assert result["status"] == "FAILED"
    assert "transcode_720p" in result["reasonForIncompletion"]
    rows = by_ref(result)
    assert [(r["attempt"], r["status"]) for r in rows["transcode_720p"]] == [
        (1, "FAILED"),
        (2, "FAILED"),
        (3, "FAILED"),
        (4, "FAILED"),
    ]
    assert [(r["attempt"], r["status"]) for r in rows["transcode_480p"]] == [
        (1, "FAILED"),
        (2, "FAILED"),
        (3, "CANCELED"),
    ]
    st = status_of(result)
    assert st["transcode_1080p"] == "COMPLETED"
    assert st["join_1080"] == "CANCELED"
    assert not {"thumbnail", "package", "write_asset", "notify_done"} & st.keys()
    assert rows["notify_failure"] == [
        {
            "taskReferenceName": "notify_failure",
            "taskType": "media.callback",
            "status": "COMPLETED",
            "attempt": 1,
        }
    ]
    assert result["tasks"][-1]["taskReferenceName"] == "notify_failure"


def test_failure_callback_input_carries_the_failed_status() -> None:
    """The CLI's --json has no task inputs (the issue's shape); read them from the simulator."""
    definition = json.loads((ROOT / "examples/media_pipeline.json").read_text())
    taskdefs = json.loads((ROOT / "examples/media_taskdefs.json").read_text())
    sim = Simulation([definition], taskdefs, FAILING, scripts=QuickJsEngine())
    result = sim.run(definition, MEDIA_INPUT, detail=True)
    [callback] = [t for t in result["tasks"] if t["taskReferenceName"] == "notify_failure"]
    assert callback["input"]["url"] == "http://cb"
    assert callback["input"]["body"]["status"] == "FAILED"
    assert callback["input"]["body"]["asset_id"] == "a1"
    assert "transcode_720p" in callback["input"]["body"]["reason"]


# -- simulate: editorial_review with media_pipeline as its sub-workflow -------------------------
EDITORIAL = (
    "examples/editorial_review.json",
    "examples/media_pipeline.json",
    "--taskdefs",
    "examples/media_taskdefs.json",
)
EDITORIAL_INPUT = {**MEDIA_INPUT, "desk": "sports"}


def _review(output: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"ref": "probe", "in_subworkflow_of": "ingest", "output": {"height": 720, "duration": 6}},
        {"external": True, "ref": "review", "output": output},
    ]


def test_simulate_editorial_review_approved(tmp_path: Path) -> None:
    script = _review({"decision": "approve", "editor": "ana", "headline": "H"})
    result = simulate(tmp_path, EDITORIAL, EDITORIAL_INPUT, script)
    assert result["status"] == "COMPLETED"
    assert result["output"]["approved_by"] == "ana"
    ingest = result["subworkflows"]["ingest"]
    assert ingest["status"] == "COMPLETED"
    assert ingest["name"] == "media_pipeline"
    assert status_of(ingest)["transcode_720p_only"] == "COMPLETED"
    st = status_of(result)
    assert st["review"] == st["meta"] == st["publish"] == "COMPLETED"
    assert "tell_requester" not in st


def test_simulate_editorial_review_rejected(tmp_path: Path) -> None:
    script = _review({"decision": "reject", "editor": "ana", "note": "blurry"})
    result = simulate(tmp_path, EDITORIAL, EDITORIAL_INPUT, script)
    assert result["status"] == "TERMINATED"
    assert result["reasonForIncompletion"] == "rejected by the editor"
    assert result["output"] == {"note": "blurry"}
    assert result["subworkflows"]["ingest"]["status"] == "COMPLETED"
    st = status_of(result)
    assert st["rejected"] == "COMPLETED"
    assert st["tell_requester"] == "COMPLETED"
    assert "publish" not in st


# -- simulate: clip_highlights ------------------------------------------------------------------
def test_simulate_clip_highlights(tmp_path: Path) -> None:
    segments = [
        {"start": s, "end": s + 10, "score": score}
        for s, score in ((0, 0.5), (10, 0.9), (20, 0.1), (30, 0.7))
    ]
    script = [
        {"ref": "purge", "output": {"purge_id": "p1"}},
        {"ref": "purge_status__1", "output": {"state": "pending"}},
        {"ref": "purge_status__2", "output": {"state": "done"}},
    ]
    inp = {"source_uri": "s3://in/match.mp4", "segments": segments, "top": 3}
    result = simulate(tmp_path, ("examples/clip_highlights.json",), inp, script)
    assert result["status"] == "COMPLETED", result.get("reasonForIncompletion")
    refs = [r["taskReferenceName"] for r in result["tasks"]]
    assert sorted(r for r in refs if r.startswith("clip_")) == ["clip_0", "clip_1", "clip_2"]
    loop = [r for r in refs if r.startswith(("pause__", "purge_status__"))]
    assert loop == ["pause__1", "purge_status__1", "pause__2", "purge_status__2"]
    assert all(s == "COMPLETED" for s in status_of(result).values())
    assert result["output"]["purge_rounds"] == 2
    assert result["virtualSeconds"] >= 60


def test_simulate_input_that_is_not_json() -> None:
    res = defs("simulate", *MEDIA, "--input", "{source_uri: nope")
    assert res.returncode == 1
    assert "Traceback" not in res.stderr
    assert "--input is not JSON" in flat(res.stderr)
    assert res.stdout == ""
