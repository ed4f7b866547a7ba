"""End to end with real media: ``VIDEOS`` generated videos (4 at the CI test scale, 10 at
``full``) and a broken file through `es-sched run` and two `es-sched worker --media`
processes, one of them SIGKILLed while it transcodes. Every valid video's workflow completes
with renditions ffprobe confirms; the broken one fails at probe and its failure callback runs."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from es_sched.cli.demo import pipeline as demo
from es_sched.domain import events as e
from testkit.procs import children, cmdline
from testkit.runtime import MEDIA, Env, Role, final_status, read_events
from testkit.scale import pick
from testkit.wait import wait_until
from tests.integration.projection_harness import dropped_schemas

pytestmark = pytest.mark.e2e
VIDEOS = pick(ci=4, full=10)


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    env = Env(
        extra={
            "ES_SCHED_DISPATCH_HEARTBEAT_S": "1",
            "ES_SCHED_DISPATCH_LEASE_K": "3",
            "ES_SCHED_MEDIA_OUTPUT_DIR": str(tmp_path / "out"),
            "ES_SCHED_MEDIA_CALLBACK_SECRET": "test-secret",
        }
    )
    with dropped_schemas(env):
        yield env


def _transcoding(worker: Role) -> bool:
    """The worker process has an ffmpeg child encoding a rendition right now, so a kill cuts
    a task in flight and its lease has to expire."""
    return any("-c:v" in cmdline(pid) for pid in children(worker.proc.pid, "ffmpeg"))


@pytest.mark.fault
def test_videos_complete_even_when_a_media_worker_is_killed(env: Env, tmp_path: Path) -> None:
    env.create()
    env.cli("defs", "push", *map(str, MEDIA))
    clips = demo.make_videos(tmp_path / "in", VIDEOS, seconds=(2, 3))
    receiver = demo.Callbacks(b"test-secret")
    url = receiver.start()
    roles = [
        Role(
            env,
            "all",
            [
                "run",
                "--role",
                "decider",
                "--role",
                "timers",
                "--role",
                "retry",
                "--role",
                "dispatcher",
            ],
        )
    ]
    workers = [
        Role(
            env,
            f"media{i}",
            [
                "worker",
                "--media",
                "--worker-id",
                f"media-{i}",
                "--concurrency",
                "2",
                "--heartbeat-s",
                "1",
            ],
        )
        for i in (1, 2)
    ]
    inputs = [
        {
            "source_uri": clip.path.as_uri(),
            "source_checksum": clip.sha256,
            "asset_id": f"a{i}",
            "callback_url": f"{url}/{i}",
        }
        for i, clip in enumerate(clips)
    ]
    starts: list[str] = []
    try:
        for r in [*roles, *workers]:
            r.wait_log("started", 120)
        starts = env.cli_submit("media_pipeline", inputs)
        wait_until(lambda: _transcoding(workers[0]), 180, "media-1 transcoding")
        os.kill(workers[0].proc.pid, signal.SIGKILL)

        def all_ended() -> bool:
            by_wf = read_events(env)
            return all(
                final_status(by_wf.get(wf, [])) in ("COMPLETED", "FAILED") for wf in starts
            ) and len(receiver.received) >= len(starts)

        wait_until(all_ended, 600, "every workflow to end and call back")
    finally:
        for r in [*workers, *roles]:
            r.stop()
        receiver.stop()
    by_wf = read_events(env)
    valid, broken = starts[:-1], starts[-1]
    assert [final_status(by_wf[wf]) for wf in valid] == ["COMPLETED"] * VIDEOS
    assert final_status(by_wf[broken]) == "FAILED"
    assert workers[0].proc.returncode == -signal.SIGKILL
    renditions = [
        ev.payload.output
        for wf in valid
        for ev in by_wf[wf]
        if isinstance(ev.payload, e.TaskCompleted)
        and "codec" in ev.payload.output
        and "height" in ev.payload.output
        and ev.payload.output.get("kind") == "rendition"
    ]
    assert len(renditions) >= VIDEOS and all(demo.probe_ok(r) for r in renditions)
    lost = [ev for v in by_wf.values() for ev in v if isinstance(ev.payload, e.LeaseExpired)]
    assert lost  # the killed worker's tasks came back and ran elsewhere
    calls = receiver.by_path()
    assert all(call["signed"] for call in calls.values()) and len(calls) == len(starts)
    assert calls[f"/{len(clips) - 1}"]["body"]["status"] == "FAILED"
