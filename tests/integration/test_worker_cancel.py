"""Cancellation on the worker (issue 12, item 2), on a real broker, the test playing the
dispatcher (``worker_harness.Dispatcher``):

- a worker frozen (SIGSTOP) while the dispatcher wrote to its partition starts, when it wakes,
  nothing whose lease ended there: not an assignment followed by its cancel, not one whose
  lease ran out during the freeze, not one read after its cancel; those a cancel ended are
  reported ``worker.task_cancelled``, the one whose time ran out ``worker.task_declined`` (the
  dispatcher may not have ended that lease: declining ends it if it lives), and a live one
  behind them starts;
- an async handler's asyncio task is cancelled (the handler sees ``CancelledError``);
- a cancelled transcode ends ffmpeg's whole process group, and the worker reports the cancel.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from es_sched.domain import commands as c
from es_sched.kafka.topics import ensure_topics, topics_for
from es_sched.settings import Settings
from es_sched.workers import TaskContext
from es_sched.workers.media import register_media
from es_sched.workers.media.files import uri_of
from testkit.procs import children
from testkit.runtime import Env, Role
from testkit.settings import BOOTSTRAP, kafka_connection, private_vars, settings_with
from testkit.wait import wait_until
from tests.integration.test_media_handlers import make_clip
from tests.integration.worker_harness import Dispatcher, Running, echoes_lease, make_worker

pytestmark = pytest.mark.integration
H = 1.0  # heartbeat
JSON = dict[str, Any]


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def _iso(at: datetime) -> str:
    return at.isoformat()


@pytest.mark.fault
def test_a_woken_worker_starts_nothing_whose_lease_ended(tmp_path: Path) -> None:
    env = Env(extra={"ES_SCHED_DISPATCH_HEARTBEAT_S": str(H), "ES_SCHED_DISPATCH_LEASE_K": "4"})
    env.create()
    starts = tmp_path / "starts.txt"
    worker = Role(
        env,
        "sleeper",
        ["sleeper"],
        module="tests.integration.ticking_worker",
        TICK_FILE=str(tmp_path / "ticks.txt"),
        START_FILE=str(starts),
        TICK_SECONDS="1",
    )
    d = Dispatcher(env.settings)
    try:
        worker.wait_log("started", 60)
        worker.proc.send_signal(signal.SIGSTOP)
        frozen_at = time.monotonic()
        later = _iso(datetime.now(UTC) + timedelta(minutes=10))
        # What a dispatcher writes for a worker that stopped heartbeating, in partition order:
        cancelled = d.assign(
            "sleeper", "tick.step", {}, task_id="cancelled", lease_epoch=1, lease_expires_at=later
        )
        d.cancel(cancelled)  # cancel, terminate, a timeout: it follows the assignment
        lapsing = datetime.now(UTC) + timedelta(seconds=H)
        d.assign(
            "sleeper",
            "tick.step",
            {},
            task_id="expired",
            lease_epoch=1,
            lease_expires_at=_iso(lapsing),
        )
        d.cancel_task("sleeper", "overtaken", 2, "preempted")  # another dispatcher's, earlier
        d.assign(
            "sleeper", "tick.step", {}, task_id="overtaken", lease_epoch=2, lease_expires_at=later
        )
        live = d.assign(
            "sleeper", "tick.step", {}, task_id="live", lease_epoch=1, lease_expires_at=later
        )
        # The fault: the lease of "expired" runs out while the worker is silent for longer
        # than the shortest lease (3 heartbeats), so the dispatcher would have expired it.
        wait_until(
            lambda: datetime.now(UTC) > lapsing and time.monotonic() - frozen_at > 3.5 * H,
            30,
            "the frozen worker's silence to outlast a lease",
        )
        worker.proc.send_signal(signal.SIGCONT)
        # The live assignment is the last record: once it started, everything before it was
        # read and decided on (one handler at a time, in partition order).
        wait_until(
            lambda: any(s.startswith("live ") for s in _lines(starts)),
            30,
            lambda: f"the live task to start; started so far: {_lines(starts)}",
        )
        assert _lines(starts) == ["live 1 sleeper"], "stale assignments were started"
        stale = ("cancelled", "expired", "overtaken")
        wait_until(lambda: all(d.types(t) for t in stale), 30, "a report of each stale task")
        reports = {t: d.reports(t) for t in stale}
        d.final(live.task_id, 30)
        live_reports = d.types(live.task_id)
    finally:
        worker.proc.send_signal(signal.SIGCONT)
        worker.stop()
        d.close()
    assert {t: [r.TYPE for r in rs] for t, rs in reports.items()} == {
        "cancelled": ["worker.task_cancelled"],
        "expired": ["worker.task_declined"],
        "overtaken": ["worker.task_cancelled"],
    }
    reasons = {
        t: rs[0].reason
        for t, rs in reports.items()
        if isinstance(rs[0], c.ReportCancelled | c.ReportDeclined)
    }
    assert reasons["cancelled"] == "cancelled before it started: canceled"
    assert "lease expired" in reasons["expired"] and "not heartbeating" in reasons["expired"]
    assert reasons["overtaken"] == "cancelled before it started"
    assert echoes_lease(reports["cancelled"][0], cancelled)
    assert live_reports == ["worker.task_started", "worker.task_completed"]


@pytest.fixture
def settings(unique: str) -> Settings:
    s = settings_with({**private_vars(unique), "ES_SCHED_MEDIA_CALLBACK_SECRET": "test-secret"})
    ensure_topics(kafka_connection(BOOTSTRAP), topics_for(s))
    return s


def test_an_async_handlers_task_is_cancelled(settings: Settings, dispatcher: Dispatcher) -> None:
    w = make_worker(settings)
    running, unwound = threading.Event(), threading.Event()

    @w.task("wait")
    async def wait(ctx: TaskContext, task_input: JSON) -> JSON:
        running.set()
        try:
            await asyncio.sleep(60)  # never looks at ctx.cancelled
        except asyncio.CancelledError:
            unwound.set()
            raise
        return {"waited": 60}

    with Running(w):
        a = dispatcher.assign(w.worker_id, "wait", {})
        assert running.wait(15)
        dispatcher.cancel(a, "preempted")
        assert unwound.wait(15), "the handler's task was never cancelled"
        cancelled = dispatcher.final(a.task_id)
        wait_until(lambda: w.running == [], 5, "the slot freed")
    assert dispatcher.types(a.task_id) == ["worker.task_started", "worker.task_cancelled"]
    assert isinstance(cancelled, c.ReportCancelled) and cancelled.reason == "preempted"


def test_a_cancelled_transcode_ends_ffmpegs_process_group(
    settings: Settings, dispatcher: Dispatcher, tmp_path: Path
) -> None:
    if shutil.which("ffmpeg") is None or shutil.which("ffprobe") is None:
        pytest.fail("ffmpeg/ffprobe missing: `es-sched stack up` installs them")
    clip = make_clip(tmp_path / "long.mp4", 60, "320x180", rate=15)
    w = register_media(make_worker(settings), settings)
    task = {
        "source": uri_of(clip),
        "height": 720,
        "codec": "h265",
        "preset": "slow",
        "name": "cancelled",
        "output_dir": str(tmp_path / "out"),
    }
    with Running(w):
        a = dispatcher.assign(w.worker_id, "media.transcode", task)
        wait_until(lambda: len(children(os.getpid(), "ffmpeg")) == 1, 60, "ffmpeg to run")
        [pid] = children(os.getpid(), "ffmpeg")
        assert os.getpgid(pid) == pid  # ffmpeg leads its own group
        dispatcher.cancel(a)
        cancelled = dispatcher.final(a.task_id, 30)
    assert isinstance(cancelled, c.ReportCancelled) and cancelled.reason == "canceled"
    with pytest.raises(ProcessLookupError):  # no process of the group is left, none a zombie
        os.killpg(pid, 0)
    assert children(os.getpid(), "ffmpeg") == []
    assert not list((tmp_path / "out").rglob("*.mp4")), "a cancelled rendition was kept"
