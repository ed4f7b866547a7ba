"""Real-Kafka harness for the runtime tests: a private topic prefix, role processes, a scripted
worker that answers the ready queue, and read-backs of the events topic.

Workflows start as a user starts them: definitions pushed and StartWorkflow commands built by
``CommandClient`` (``Env.push``, ``Env.submit``), which validates them and embeds the
definition, or by the ``es-sched`` command line (``Env.cli``, ``Env.cli_submit``) where the test
drives es-sched from its command line. ``Env.send`` produces other inputs (a worker's report)
as their producer would.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any, Self, cast

from confluent_kafka import KafkaException

from es_sched import bootstrap
from es_sched.audit.check import check
from es_sched.audit.read import read_log
from es_sched.commands import CommandClient, Submitted
from es_sched.domain import commands as c
from es_sched.domain.events import Event, TaskScheduled
from es_sched.domain.ids import refusal_event_id
from es_sched.domain.refusals import is_refusal
from es_sched.domain.state import WORKFLOW_TERMINAL
from es_sched.kafka.clients import consumer, producer
from es_sched.kafka.connection import KafkaConnection, connection
from es_sched.kafka.topics import Topics, ensure_topics, topics_for
from es_sched.projections.replay import projected
from es_sched.serialization import decode_event, encode_input
from es_sched.serialization.records import decode_ready
from es_sched.settings import Settings
from testkit import ROOT, role_logs
from testkit.cli import es_sched
from testkit.kafka import read_to_end
from testkit.procs import stacks
from testkit.settings import BOOTSTRAP, kafka_connection, private_vars, settings_with, unique_name
from testkit.wait import wait_for_log, wait_until

MEDIA = (ROOT / "examples" / "media_pipeline.json", ROOT / "examples" / "media_taskdefs.json")


def media_inputs(n: int, tag: str = "") -> list[dict[str, Any]]:
    """``n`` valid inputs of the media pipeline, with distinct sources and asset ids."""
    return [
        {
            "source_uri": f"file:///in/{tag}{i}.mp4",
            "asset_id": f"a{tag}{i}",
            "callback_url": "http://cb",
        }
        for i in range(n)
    ]


@dataclass
class Env:
    """One test's private topics, schema and indices; ``extra`` adds ``ES_SCHED_*`` settings
    for this process's ``settings`` and for every child it starts."""

    prefix: str = field(default_factory=unique_name)
    partitions: int = 4
    extra: dict[str, str] = field(default_factory=dict)
    bootstrap: str = BOOTSTRAP  # another broker for tests that run a private one

    @property
    def vars(self) -> dict[str, str]:
        return {
            **private_vars(self.prefix, self.partitions, bootstrap=self.bootstrap),
            **self.extra,
        }

    @cached_property
    def settings(self) -> Settings:
        return settings_with(self.vars)

    @property
    def topics(self) -> Topics:
        return topics_for(self.settings)

    @property
    def kafka(self) -> KafkaConnection:
        """The test's own way in to this env's broker: its settings' security, as admin."""
        return connection(self.settings.kafka, "admin")

    def create(self) -> None:
        ensure_topics(self.kafka, self.topics)

    @contextmanager
    def client(self) -> Iterator[CommandClient]:
        """A user's command client for these topics (one per call, as one CLI invocation), as
        the admin principal on a secured broker (definitions are an operator's to push)."""
        admin = replace(
            self.settings, kafka=self.settings.kafka.model_copy(update={"principal": "admin"})
        )
        with CommandClient(admin) as client:
            yield client

    def push_files(self, *paths: Path) -> None:
        with self.client() as client:
            client.push_definitions(paths)

    def push(self, definition: dict[str, Any], taskdefs: list[dict[str, Any]]) -> None:
        """Push a definition written in the test, through the client, from a temporary file."""
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / f"{definition['name']}.json"
            path.write_text(json.dumps([definition, *taskdefs]))
            self.push_files(path)

    def submit(
        self, name: str, inputs: Sequence[dict[str, Any]], command_ids: Sequence[str] | None = None
    ) -> list[Submitted]:
        """Start one workflow per input, as ``CommandClient.submit_many`` does for a user."""
        with self.client() as client:
            return client.submit_many(name, inputs, command_ids=command_ids)

    def cli(self, *args: str) -> str:
        """``es-sched ARGS`` run as a user runs it, with this env; its standard output."""
        done = es_sched(*args, env=self.vars)
        assert done.returncode == 0, f"es-sched {' '.join(args)}:\n{done.stderr}"
        return done.stdout

    def cli_submit(self, name: str, inputs: Sequence[dict[str, Any]]) -> list[str]:
        """``es-sched submit NAME --input-file`` (one JSONL line per input): the workflow ids,
        in input order."""
        with tempfile.TemporaryDirectory() as folder:
            lines = Path(folder) / "inputs.jsonl"
            lines.write_text("".join(json.dumps(doc) + "\n" for doc in inputs))
            rows = json.loads(self.cli("submit", name, "--input-file", str(lines), "--json"))
        return [str(row["workflow_id"]) for row in rows]

    def send(self, inputs: Sequence[c.Input], topic: str) -> None:
        """Produce inputs that are not a user's commands (a worker's report, say) to ``topic``."""
        p = producer(kafka_connection(self.bootstrap))
        for inp in inputs:
            p.produce(topic, key=inp.workflow_id.encode(), value=encode_input(inp))
            p.poll(0)
        assert p.flush(60) == 0


class Role:
    """``es-sched run --role ROLE`` (or ``argv``; or ``python -m module argv``) as a child
    process with this env, logging to a file."""

    def __init__(
        self,
        env: Env,
        role: str,
        argv: Sequence[str] = (),
        module: str = "es_sched",
        **extra_env: str,
    ) -> None:
        logs = Path(tempfile.gettempdir()) / "es-sched-test-roles"
        logs.mkdir(exist_ok=True)
        self.log = role_logs.started(logs / f"{env.prefix}-{role}-{uuid.uuid4().hex[:6]}.log")
        command = list(argv) or ["run", "--role", role]
        self.has_stacks = module == "es_sched" and command[0] in ("run", "worker")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", module, *command],
            env={**os.environ, **env.vars, **extra_env},
            stdout=self.log.open("w"),
            stderr=subprocess.STDOUT,
            cwd=ROOT,  # so that ``-m tests...`` finds the test modules
        )

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_log(self, text: str, timeout_s: float = 60) -> None:
        wait_for_log(self.log, text, timeout_s, self.proc)

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.kill()


Policy = Callable[[dict[str, Any]], tuple[str, dict[str, Any]]]
"""ready record -> ("COMPLETED" | "FAILED", output)."""


def second_dispatcher(env: Env) -> Role:
    """A second dispatcher process beside one of instance 0: the dispatcher is a static group
    member under its instance, which only one live process may hold (ADR 79)."""
    return Role(env, "dispatcher", ES_SCHED_RUN_INSTANCE="1")


def complete_all(task: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    if task["name"] == "media.probe":
        return "COMPLETED", {"height": 1080, "duration": 4.0}
    return "COMPLETED", {"ok": task["ref"]}


class Worker:
    """Plays the dispatcher and every worker: reads the ready queue, leases each task to itself
    (a ``DispatchTask``, as the dispatcher would send first) and reports from that lease to
    task-results; the decider accepts a report only from the live lease. ``answer`` says what
    it sends for a task (a subclass may answer otherwise)."""

    def __init__(self, env: Env, policy: Policy = complete_all) -> None:
        self.env, self.policy = env, policy
        self.stop = threading.Event()
        self.executions: list[tuple[str, int, str]] = []  # (task_id, attempt, status)
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Self:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(30)

    def answer(self, task: dict[str, Any]) -> list[c.Input]:
        """What the dispatcher and the worker send for a ready ``task``, in order."""
        status, output = self.policy(task)
        base = dict(
            workflow_id=task["workflow_id"],
            task_id=task["task_id"],
            attempt=task["attempt"],
            worker_id="test-worker",
            lease_epoch=1,
            lease_token=f"tok-{task['task_id']}",
        )
        lease = c.DispatchTask(f"dispatch:{task['task_id']}:1", **base)
        report: c.Input
        rid = f"report:{task['task_id']}:{task['attempt']}"
        if status == "COMPLETED":
            report = c.ReportCompleted(rid, output=output, **base)
        else:
            report = c.ReportFailed(rid, reason=f"scripted failure of {task['ref']}", **base)
        self.executions.append((task["task_id"], task["attempt"], status))
        return [lease, report]

    def _run(self) -> None:
        # At-least-once like a real worker; auto-commit is enough for a test double.
        cons = consumer(
            kafka_connection(self.env.bootstrap),
            f"{self.env.prefix}-worker",
            **{"enable.auto.commit": True, "enable.auto.offset.store": True},
        )
        cons.subscribe([self.env.topics.ready])
        prod = producer(kafka_connection(self.env.bootstrap))
        try:
            while not self.stop.is_set():
                for msg in cons.consume(500, 0.2):
                    if msg.error() is not None:
                        continue
                    task = cast(dict[str, Any], decode_ready(msg.value()))
                    for inp in self.answer(task):  # one key: the decider reads them in order
                        prod.produce(
                            self.env.topics.task_results,
                            key=inp.workflow_id.encode(),
                            value=encode_input(inp),
                        )
                    prod.poll(0)
                prod.flush(10)
        finally:
            prod.flush(30)
            cons.close()


def read_events(env: Env, isolation: str = "read_committed") -> dict[str, list[Event]]:
    """Every event of the events topic, by workflow, in offset order."""
    by_wf: dict[str, list[Event]] = defaultdict(list)
    for msg in read_to_end(env.topics.events, isolation, bootstrap=env.bootstrap):
        event = decode_event(msg.value() or b"")
        by_wf[event.workflow_id].append(event)
    return dict(by_wf)


def count_records(env: Env, topic: str, isolation: str) -> int:
    return len(read_to_end(topic, isolation, bootstrap=env.bootstrap))


def assert_audit_clean(env: Env) -> None:
    """I1-I3 and I5 of ``es-sched audit check`` over the log as it is (other cases may still
    run, so not idle)."""
    report = check(read_log(env.settings), False, bootstrap.script_engine())
    assert report.ok, "\n".join(v.line() for v in report.violations[:20])


def assert_log_invariants(
    env: Env, ids: set[str], status: str = "COMPLETED", read_models: bool = False
) -> None:
    """The invariants every fault test ends on, checked by ``es-sched audit check``'s own
    rules (``es_sched.audit``: I1 no lost work, I2 seq 1..n once each, I3 one accepted outcome
    per attempt from the live lease, I5 decide over the recorded inputs gives the recorded
    events), the system declared idle when ``status`` is terminal; and what the test expects:
    exactly the workflows ``ids`` have a history (none lost, none invented), each folded to
    ``status``. Refusals outside any history (ADR 11) are no workflow's history.

    ``read_models``: projectors ran, so I4 too: once both read models have projected the whole
    log, ``es-sched audit check`` compares every workflow of PostgreSQL and of the search
    engine with the fold of the log, and finds them all equal."""
    report = check(
        read_log(env.settings), WORKFLOW_TERMINAL.__contains__(status), bootstrap.script_engine()
    )
    assert report.ok, "\n".join(v.line() for v in report.violations[:20])
    have = set(report.states)
    assert have == ids, f"missing {sorted(ids - have)[:5]}, extra {sorted(have - ids)[:5]}"
    wrong = {wf: st.status for wf, st in report.states.items() if st.status != status}
    assert not wrong, f"not {status}: {dict(list(wrong.items())[:5])}"
    if read_models:
        assert_read_models(env, len(ids))


def read_models_caught_up(env: Env) -> bool:
    """Both read models reflect every event of the log (their checkpoints reach its end)."""
    ends: dict[int, int] = {}
    for m in read_to_end(env.topics.events, "read_committed", bootstrap=env.bootstrap):
        ends[m.partition() or 0] = max(ends.get(m.partition() or 0, 0), (m.offset() or 0) + 1)
    for target in ("pg", "search"):
        store = bootstrap.store(env.settings, target)
        try:
            have = projected(store, env.topics.events, sorted(ends)) or {}
        finally:
            store.close()
        if any(have.get(p, 0) < end for p, end in ends.items()):
            return False
    return bool(ends)


def assert_read_models(env: Env, workflows: int, timeout_s: float = 300) -> None:
    """I4 by ``es-sched audit check --idle``, as an operator runs it, once both read models
    caught up: no violation, and all ``workflows`` compared in PostgreSQL and in search."""
    wait_until(lambda: read_models_caught_up(env), timeout_s, "both read models caught up")
    done = es_sched(
        "audit", "check", "--prefix", env.prefix, "--idle", "--json", env=env.vars, timeout_s=600
    )
    assert done.stdout, done.stderr
    report = json.loads(done.stdout)
    assert (done.returncode, report["violations"][:20]) == (0, []), report["counts"]
    compared = (report["counts"]["I4_compared_pg"], report["counts"]["I4_compared_search"])
    assert compared == (workflows, workflows), report["counts"]


def histories(env: Env) -> dict[str, list[Event]]:
    """``read_events`` without refusals (checked here: seq 0, the id of their input); a
    workflow id that was only ever refused has no history and is absent."""
    out: dict[str, list[Event]] = {}
    for wf, events in read_events(env).items():
        for r in filter(is_refusal, events):
            assert (r.seq, r.event_id) == (0, refusal_event_id(wf, r.causation_id)), r
        history = [e for e in events if not is_refusal(e)]
        if history:
            out[wf] = history
    return out


def final_status(events: list[Event]) -> str:
    for event in reversed(events):
        if event.type == "workflow.completed":
            return "COMPLETED"
        if event.type == "workflow.ended":
            return str(event.payload.status)  # type: ignore[attr-defined]
    return "RUNNING"


def completed(env: Env) -> int:
    """How many workflows of the events topic have completed."""
    return sum(final_status(v) == "COMPLETED" for v in read_events(env).values())


@contextmanager
def roles(env: Env, *names: str, **extra_env: str) -> Iterator[list[Role]]:
    started = [Role(env, n, **extra_env) for n in names]
    try:
        for r in started:
            r.wait_log("started")
        yield started
    finally:
        for r in started:
            r.stop()


def _step(event: Event, refs: dict[str, str]) -> str:
    """One event as ``type ref#attempt[/epoch] hh:mm:ss`` (what a stall report needs)."""
    p = event.payload
    task_id = getattr(p, "task_id", None)
    ref = refs.get(task_id, "?") if task_id else ""
    attempt = getattr(p, "attempt", getattr(p, "next_attempt", None))
    epoch = getattr(p, "lease_epoch", None)
    what = ref + (f"#{attempt}" if attempt is not None else "")
    what += f"/e{epoch}" if epoch is not None else ""
    return f"{event.type} {what} {event.occurred_at:%H:%M:%S}".replace("  ", " ")


def describe_stall(env: Env, expected: int, *logs: Role, stuck_shown: int = 5) -> str:
    """What a stalled run looks like, for a timeout's message: how many workflows completed
    and which are still running, the last events of a few of those, and each process's log
    tail (warnings and errors first, they say what is stuck)."""
    try:
        by_wf = read_events(env)
    except (AssertionError, KafkaException) as exc:  # keep the timeout, say why no detail
        return f"(events unreadable: {exc!r})"
    status = {wf: final_status(v) for wf, v in by_wf.items()}
    done = sum(s == "COMPLETED" for s in status.values())
    stuck = sorted(wf for wf, s in status.items() if s == "RUNNING")
    lines = [
        f"{done} of {expected} workflows completed, {len(stuck)} running,"
        f" {len(status) - done - len(stuck)} ended otherwise"
    ]
    for wf in stuck[:stuck_shown]:
        events = by_wf[wf]
        refs = {
            p.task_id: p.ref for p in (e.payload for e in events) if isinstance(p, TaskScheduled)
        }
        lines.append(
            f"  {wf} ({len(events)} events), last: "
            + "; ".join(_step(e, refs) for e in events[-5:])
        )
    for role in logs:
        text = role.text()
        trouble = [
            ln
            for ln in text.splitlines()  # librdkafka's own lines: a flood of FAILs
            if (" WARNING " in ln or " ERROR " in ln) and "librdkafka" not in ln
        ]
        code = role.proc.poll()
        alive = "running" if code is None else f"EXITED with code {code}"
        lines.append(
            f"--- {role.log.name} ({alive}): {len(trouble)} warning/error lines, the last 15:"
        )
        lines += trouble[-15:]
        lines += [f"--- {role.log.name}: tail", text[-2500:]]
        if role.has_stacks and code is None:  # where each thread waits now
            lines.append(stacks(role.proc, role.log))
    return "\n".join(lines)
