"""``es-sched demo [--videos N] [--keep]``: see ``es_sched.cli.demo.pipeline``. This module
runs it: the stack, the processes, the submissions, the live display and the summary."""

from __future__ import annotations

import os
import secrets
import socket
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click
from confluent_kafka import OFFSET_END, TopicPartition
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table

from es_sched import bootstrap
from es_sched.cli.demo import pipeline as demo
from es_sched.domain import events as e
from es_sched.kafka.clients import consumer, watermarks
from es_sched.kafka.connection import connection
from es_sched.kafka.tail import Tail
from es_sched.kafka.topics import existing_partitions, topics_for
from es_sched.serialization import decode_logged_event
from es_sched.settings import Settings, load_settings
from es_sched.stack import Stack

ROOT = Path.cwd()
PREFIX, SCHEMA = "es-sched-demo", "es_sched_demo"
out = Console(width=None if sys.stdout.isatty() else 140)


@dataclass
class Board:
    """What the events say about this run's workflows, for the live display and summary."""

    mine: set[str]
    status: dict[str, str] = field(default_factory=dict)
    reasons: dict[str, str] = field(default_factory=dict)
    names: dict[str, str] = field(default_factory=dict)  # task id -> task name
    tasks: dict[str, str] = field(default_factory=dict)  # task id -> state
    renditions: list[dict[str, Any]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    def apply(self, ev: e.Event) -> None:
        if ev.workflow_id not in self.mine:
            return
        p = ev.payload
        match p:
            case e.WorkflowStarted():
                self.status[ev.workflow_id] = "RUNNING"
            case e.WorkflowCompleted():
                self.status[ev.workflow_id] = "COMPLETED"
            case e.WorkflowEnded():
                self.status[ev.workflow_id], self.reasons[ev.workflow_id] = p.status, p.reason
            case e.TaskScheduled():
                self.names[p.task_id], self.tasks[p.task_id] = p.name, "SCHEDULED"
            case e.TaskStarted():
                self.tasks[p.task_id] = "IN_PROGRESS"
            case e.TaskCompleted():
                self.tasks[p.task_id] = "COMPLETED"
                if self.names.get(p.task_id) == "media.transcode":
                    self.renditions.append(dict(p.output))
            case e.TaskFailed():
                self.tasks[p.task_id] = "FAILED"
                self.failures.append(f"{self.names.get(p.task_id, '?')}: {p.reason}")

    def finished(self) -> int:
        return sum(s not in ("RUNNING",) for s in self.status.values())

    def table(self, callbacks: int) -> Table:
        t = Table(title="es-sched demo: live", show_header=True)
        t.add_column("what")
        t.add_column("count", justify="right")
        wf = list(self.status.values())
        tasks = list(self.tasks.values())
        t.add_row("workflows running", str(wf.count("RUNNING")))
        t.add_row("workflows completed", str(wf.count("COMPLETED")))
        t.add_row("workflows failed", str(len(wf) - wf.count("RUNNING") - wf.count("COMPLETED")))
        for state in ("SCHEDULED", "IN_PROGRESS", "COMPLETED", "FAILED"):
            t.add_row(f"tasks {state.lower()}", str(tasks.count(state)))
        t.add_row("renditions done", str(len(self.renditions)))
        t.add_row("callbacks received", str(callbacks))
        if self.failures:
            t.add_row("last task failure", self.failures[-1][:80])
        return t


@click.command("demo")
@click.option("--videos", type=click.IntRange(1, 200), default=6, show_default=True)
@click.option("--keep", is_flag=True, help="Leave the roles and workers running afterwards.")
@click.option("--timeout-s", type=float, default=900.0, show_default=True)
def demo_command(videos: int, keep: bool, timeout_s: float) -> None:
    """Run the media pipeline on N generated videos (and one broken file), end to end."""
    run = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    base = ROOT / ".state" / "demo"
    outputs, logs = base / "out" / run, base / "logs" / run
    logs.mkdir(parents=True, exist_ok=True)
    secret = secrets.token_hex(16)
    port = _console_port()
    env = {
        "ES_SCHED_KAFKA_TOPIC_PREFIX": PREFIX,
        "ES_SCHED_PG_SCHEMA_NAME": SCHEMA,
        "ES_SCHED_MEDIA_OUTPUT_DIR": str(outputs),
        "ES_SCHED_MEDIA_CALLBACK_SECRET": secret,
        "ES_SCHED_DISPATCH_HEARTBEAT_S": "2",
        # the console for this run: loopback only, so it may go without keys (ADR 25)
        "ES_SCHED_API_HOST": "127.0.0.1",
        "ES_SCHED_API_PORT": str(port),
        "ES_SCHED_API_AUTH": "off",
    }
    os.environ.update(env)
    settings = load_settings()
    with out.status("bringing the stack up (first time: installs Kafka, OpenSearch, PostgreSQL)"):
        statuses = Stack(settings).up()
    if not all(s.healthy for s in statuses):
        raise click.ClickException("the stack is not healthy: `es-sched stack status`")
    kept = kept_partitions(
        settings, existing_partitions(connection(settings.kafka), topics_for(settings).events)
    )
    if kept is not None:
        env["ES_SCHED_KAFKA_PARTITIONS"] = os.environ["ES_SCHED_KAFKA_PARTITIONS"] = str(kept)
        settings = load_settings()
        out.print(f"the demo's topics, from an earlier run, have {kept} partitions: kept (ADR 53)")
    with out.status(f"generating {videos} test videos and a broken file"):
        clips = demo.make_videos(base / "in", videos)
    receiver = demo.Callbacks(secret.encode())
    url = receiver.start()
    procs = demo.Processes(env, logs)
    procs.start("roles", "run")
    procs.start("api", "api")
    for n in (1, 2):
        procs.start(
            f"media-{n}",
            "worker",
            "--media",
            "--worker-id",
            f"demo-media-{n}-{run}",
            "--concurrency",
            "2",
        )
    try:
        for name in ("roles", "media-1", "media-2"):
            procs.wait_log(name, "started", 180)
        procs.wait_log("api", "API on", 60)
        out.print(
            f"console: [bold]http://127.0.0.1:{port}/ui/[/] (this run's workflows as they go)"
        )
        summary = _drive(settings, clips, url, run, receiver, timeout_s)
    finally:
        if not keep:
            procs.stop()
        receiver.stop()
    out.print()
    _print_summary(summary, clips, outputs, logs)
    if not keep:
        out.print(
            f"the console (http://127.0.0.1:{port}/ui/) stopped with the run; `--keep` leaves it up"
        )
    if keep:
        pids = " ".join(str(p.pid) for _, p in procs.children)
        out.print(f"console: [bold]http://127.0.0.1:{port}/ui/[/] (left running, --keep)")
        out.print(f"roles, workers and console left running: stop them with `kill {pids}`")
    ok = summary["completed"] == len(clips) - 1 and summary["broken_failed"]
    sys.exit(0 if ok and summary["verified"] == summary["renditions"] else 1)


def kept_partitions(settings: Settings, found: int | None) -> int | None:
    """The partition count the demo's topics already have, when it is not the one configured
    and nobody chose one: a local stack that ran the demo before the default became 4 (ADR 53)
    keeps its topics, whose count cannot change, and the demo runs on them."""
    chosen = "ES_SCHED_KAFKA_PARTITIONS" in os.environ
    if found is None or chosen or found == settings.kafka.partitions:
        return None
    return found


def _console_port() -> int:
    """``ES_SCHED_API_PORT`` (8080) when it is free, else any free loopback port: a demo left
    running with ``--keep`` must not stop the next one from showing its console."""
    wanted = load_settings().api.port
    for port in (wanted, 0):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return int(s.getsockname()[1])
    raise click.ClickException("no free port for the console")


def _drive(
    settings: Any,
    clips: list[demo.Video],
    url: str,
    run: str,
    receiver: demo.Callbacks,
    timeout_s: float,
) -> dict[str, Any]:
    topics = topics_for(settings)
    tail = Tail(connection(settings.kafka), topics.events, OFFSET_END)
    # Pin the start to each partition's log end now (OFFSET_END resolves lazily, at the first
    # fetch, and could skip the first events of the workflows submitted next).
    probe = consumer(connection(settings.kafka), None, **{"isolation.level": "read_uncommitted"})
    ends = [
        TopicPartition(topics.events, p, watermarks(probe, TopicPartition(topics.events, p))[1])
        for p in tail.partitions
    ]
    probe.close()
    tail.consumer.assign(ends)
    client = bootstrap.command_client(settings)
    client.push_definitions(
        [ROOT / "examples" / "media_pipeline.json", ROOT / "examples" / "media_taskdefs.json"]
    )
    submitted: dict[str, tuple[demo.Video, float]] = {}
    started = time.time()
    for i, clip in enumerate(clips):
        doc = {
            "source_uri": clip.path.resolve().as_uri(),
            "source_checksum": clip.sha256,
            "asset_id": f"{run}-{i:02d}",
            "callback_url": f"{url}/{run}-{i:02d}",
        }
        sent = client.submit("media_pipeline", doc, command_id=f"demo-{run}-{i:02d}")
        submitted[sent.workflow_id] = (clip, time.time())
    client.close()
    board = Board(set(submitted))
    deadline = time.monotonic() + timeout_s
    with Live(board.table(0), console=out, refresh_per_second=4) as live:
        while time.monotonic() < deadline:
            for msg in tail.poll(1000, 0.25):
                raw = msg.value()
                board.apply(decode_logged_event(raw if isinstance(raw, bytes) else b""))
            live.update(Group(board.table(len(receiver.received))))
            if board.finished() == len(submitted) and len(receiver.received) >= len(submitted):
                break
    tail.close()
    elapsed = time.time() - started
    calls = receiver.by_path()
    latency = [
        calls[f"/{run}-{i:02d}"]["at"] - submitted[wf][1]
        for i, wf in enumerate(submitted)
        if f"/{run}-{i:02d}" in calls
    ]
    broken_wf = next(wf for wf, (clip, _) in submitted.items() if clip.broken)
    verified = sum(demo.probe_ok(r) for r in board.renditions)
    failed = {
        wf: (board.status.get(wf, "RUNNING"), board.reasons.get(wf, ""))
        for wf in submitted
        if board.status.get(wf) != "COMPLETED"
    }
    broken_status = board.status.get(broken_wf)
    broken_called = f"/{run}-{len(clips) - 1:02d}" in calls
    return {
        "completed": sum(s == "COMPLETED" for s in board.status.values()),
        "failed": failed,
        "broken_failed": broken_status not in (None, "RUNNING", "COMPLETED") and broken_called,
        "renditions": len(board.renditions),
        "verified": verified,
        "seconds": elapsed,
        "video_seconds": sum(c.seconds for c in clips),
        "callbacks": len(calls),
        "signed": sum(c["signed"] for c in calls.values()),
        "latency": latency,
        "example": next(iter(submitted)),
        "prefix": settings.kafka.topic_prefix,
    }


def _print_summary(s: dict[str, Any], clips: list[demo.Video], outputs: Path, logs: Path) -> None:
    t = Table(title="es-sched demo: summary")
    t.add_column("figure")
    t.add_column("value")
    t.add_row("videos submitted", f"{len(clips)} ({len(clips) - 1} valid, 1 broken)")
    t.add_row("workflows completed", str(s["completed"]))
    for wf, (status, reason) in s["failed"].items():
        t.add_row(f"workflow {wf[:8]}… {status}", reason[:300] or "(no reason)")
    t.add_row("renditions produced", f"{s['renditions']} (ffprobe confirms {s['verified']})")
    t.add_row(
        "throughput",
        f"{len(clips) / s['seconds'] * 60:.1f} workflows/min, "
        f"{s['video_seconds'] / s['seconds']:.2f} video-seconds/s",
    )
    p50, p95 = demo.percentile(s["latency"], 0.5), demo.percentile(s["latency"], 0.95)
    latency = f"{p50:.1f} s / {p95:.1f} s" if p50 is not None and p95 is not None else "n/a"
    t.add_row("submit -> callback p50 / p95", latency)
    t.add_row("callbacks received (signature ok)", f"{s['callbacks']} ({s['signed']})")
    t.add_row("outputs", str(outputs))
    t.add_row("logs", str(logs))
    history = f"ES_SCHED_KAFKA_TOPIC_PREFIX={s['prefix']} es-sched history {s['example']}"
    t.add_row("one workflow's history", history)
    out.print(t)
