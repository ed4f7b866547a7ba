"""The whole system as separate processes under load, for the process-level fault tests.

``System`` starts every role as its own ``es-sched run --role X`` process (decider, timers,
retry relay, dispatcher, projector-pg, projector-search) and workers as their own processes
(``tests.integration.flaky_worker``), on one test's private topics, schema and indices. The
workload (``FLOW``) gives every role work all the time: a worker task, a WAIT of tens of
seconds (timers), a task whose first attempt fails (one workflow in five) with a 2 s retry
delay (retry relay), a last worker task; the projectors project every event. ``top_up`` keeps
the workflows the test asks for in flight. The projectors reach PostgreSQL and the search
engine through ``testkit.proxy`` forwarders, so a test can stop both stores for them
(``proxies``) without stopping the stores other tests share; each projector serves its
metrics.

What the test reads, it reads from the log: ``EventTail`` follows the events topic (which
workflows started and ended, which worker each task was leased to) and ``FireTail`` the timer
and retry fires on the commands topic, each record with the time it was written, so the
number in flight at a fault and the time to the first new output of a restarted role are
facts of the log, not guesses."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit

from confluent_kafka import TopicPartition

from es_sched import bootstrap
from es_sched.domain.commands import FireTimer
from es_sched.domain.events import TaskDispatched
from es_sched.kafka.clients import consumer
from es_sched.kafka.topics import assignment_topic
from es_sched.projections.replay import projected
from es_sched.serialization import decode_event, decode_input
from testkit.net import free_port
from testkit.proxy import Proxy
from testkit.runtime import Env, Role
from testkit.scale import pick
from testkit.settings import kafka_connection
from testkit.wait import wait_until
from tests.integration.projection_harness import dropped_schemas

PARTITIONS = 4
FLOW = {
    "name": "fault_flow",
    "version": 1,
    "tasks": [
        {"name": "fault.step", "taskReferenceName": "a"},
        {
            "name": "pause",
            "taskReferenceName": "pause",
            "type": "WAIT",
            "inputParameters": {"duration": "${workflow.input.wait}"},
        },
        {
            "name": "fault.flaky",
            "taskReferenceName": "flaky",
            "inputParameters": {"fail": "${workflow.input.fail}"},
        },
        {"name": "fault.step", "taskReferenceName": "b"},
    ],
}
TASKDEFS = [
    {"name": "fault.step", "retryCount": 0, "responseTimeoutSeconds": 3600},
    {
        "name": "fault.flaky",
        "retryCount": 2,
        "retryLogic": "FIXED",
        "retryDelaySeconds": 2,
        "responseTimeoutSeconds": 3600,
    },
]
ROLES = ("decider", "timers", "retry", "dispatcher", "projector-pg", "projector-search")
TERMINAL = ("workflow.completed", "workflow.ended")


class _Tail:
    """Every record of ``topic`` from offset 0 (read_committed), decoded by ``on`` with its
    create time (this host's clock: its producer runs here), in a thread."""

    def __init__(self, env: Env, topic: str) -> None:
        self.env, self.topic = env, topic
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        cons = consumer(kafka_connection(self.env.bootstrap), None)
        cons.assign([TopicPartition(self.topic, p, 0) for p in range(PARTITIONS)])
        try:
            while not self.stop.is_set():
                for msg in cons.consume(1000, 0.1):
                    if msg.error() is None and msg.value():
                        with self.lock:  # when its producer wrote it (not when read here)
                            self.on(msg.timestamp()[1] / 1000, msg.value() or b"")
        finally:
            cons.close()

    def on(self, now: float, value: bytes) -> None:
        raise NotImplementedError

    def close(self) -> None:
        self.stop.set()
        self.thread.join(30)


class EventTail(_Tail):
    """The events topic as it grows: workflows started and ended, each task's lease holder."""

    def __init__(self, env: Env) -> None:
        self.started: set[str] = set()
        self.ended: set[str] = set()
        self.holder: dict[str, str] = {}  # task id -> worker of its latest lease
        self.finished: set[str] = set()  # task ids completed or failed
        self.redispatched: list[tuple[float, str, str]] = []  # (written, task id, worker)
        self.written: list[float] = []
        super().__init__(env, env.topics.events)

    def on(self, now: float, value: bytes) -> None:
        event = decode_event(value)
        self.written.append(now)
        p = event.payload
        if event.type == "workflow.started":
            self.started.add(event.workflow_id)
        elif event.type in TERMINAL:
            self.ended.add(event.workflow_id)
        elif isinstance(p, TaskDispatched):
            if p.task_id in self.holder:
                self.redispatched.append((now, p.task_id, p.worker_id))
            self.holder[p.task_id] = p.worker_id
        elif event.type in ("task.completed", "task.failed"):
            self.finished.add(str(getattr(p, "task_id", "")))

    def in_flight(self) -> int:
        with self.lock:
            return len(self.started - self.ended)

    def first_after(self, at: float) -> float | None:
        with self.lock:
            return next((t for t in self.written if t > at), None)

    def last_written(self) -> float:
        """Create time of the last record read (0 before any)."""
        with self.lock:
            return self.written[-1] if self.written else 0.0

    def fresh(self, within_s: float) -> bool:
        """The tail has read a record written within ``within_s`` of now."""
        return time.time() - self.last_written() < within_s

    def held_by(self, worker: str) -> set[str]:
        """Tasks whose latest lease is ``worker``'s and that have not finished."""
        with self.lock:
            return {t for t, w in self.holder.items() if w == worker} - self.finished


class FireTail(_Tail):
    """Timer fires on the commands topic (``timer.fired``), by kind, with their create time."""

    def __init__(self, env: Env) -> None:
        self.fires: list[tuple[float, str]] = []  # (written, kind)
        super().__init__(env, env.topics.commands)

    def on(self, now: float, value: bytes) -> None:
        inp = decode_input(value)
        if isinstance(inp, FireTimer):
            self.fires.append((now, inp.kind))

    def first_after(self, at: float, retry: bool) -> float | None:
        with self.lock:
            return next((t for t, k in self.fires if t > at and (k == "retry") == retry), None)

    def count(self, since: float, until: float, retry: bool) -> int:
        with self.lock:
            return sum(since < t <= until and (k == "retry") == retry for t, k in self.fires)


# The WAIT's spread: 40-100 s, or 20-50 s at the CI test scale, whose smaller in-flight load
# needs no longer a wait to stay in flight, and whose run then drains sooner.
WAIT_FROM_S, WAIT_SPREAD_S = pick(ci=(20, 31), full=(40, 61))


def wait_input(i: int) -> dict[str, Any]:
    """Waits spread over ``WAIT_FROM_S`` and ``WAIT_SPREAD_S`` more (a fixed walk, not
    randomness): workflows leave the WAIT a few at a time, so timers, retries and workers
    always have some work. One workflow in five has its ``fault.flaky`` fail once (an ordinary
    retryable failure, which never counts against a worker, ADR 58)."""
    return {"n": i, "wait": f"{WAIT_FROM_S + (i * 37) % WAIT_SPREAD_S}s", "fail": i % 5 == 0}


class System:
    """Every role a process of its own, worker processes, two tails on the log."""

    def __init__(self) -> None:
        self.env = Env(partitions=PARTITIONS)
        self.roles: dict[str, Role] = {}
        self.submitted: set[str] = set()
        self.n = 0
        self.tails: list[_Tail] = []
        self._dispatch_base: dict[float, int] = {}
        # The projectors reach their stores through these (``outage``); the test does not.
        pg, search = self.env.settings.postgres, urlsplit(self.env.settings.search.url)
        self.proxies = {
            "projector-pg": Proxy(pg.host, pg.port),
            "projector-search": Proxy(search.hostname or "127.0.0.1", search.port or 9200),
        }
        self.store_env = {
            "projector-pg": {
                "ES_SCHED_PG_URL": pg.url.replace(
                    f"{pg.host}:{pg.port}", f"127.0.0.1:{self.proxies['projector-pg'].port}"
                )
            },
            "projector-search": {
                "ES_SCHED_SEARCH_URL": f"http://127.0.0.1:{self.proxies['projector-search'].port}"
            },
        }
        self.metrics_port = {name: free_port() for name in self.proxies}

    def start_all(self, workers: int) -> None:
        self.env.create()
        self.env.push(FLOW, TASKDEFS)
        for name in ROLES:
            self.start(name)
        for i in range(workers):
            w = f"w{i}"
            self.roles[w] = Role(self.env, w, [w], module="tests.integration.flaky_worker")
        for role in self.roles.values():
            role.wait_log("started", 120)
        self.events = EventTail(self.env)
        self.fires = FireTail(self.env)
        self.tails = [self.events, self.fires]

    def start(self, name: str, role: str | None = None, **extra_env: str) -> Role:
        """Start (or restart, as a supervisor would) ``name``: ``es-sched run --role ROLE``
        (``role`` defaults to ``name``; a second decider is ``start("decider-b", "decider")``)."""
        argv = ["run", "--role", role or name]
        if name in self.proxies:
            argv += ["--metrics-port", str(self.metrics_port[name])]
            extra_env = {**self.store_env[name], **extra_env}
        self.roles[name] = Role(self.env, name, argv, **extra_env)
        return self.roles[name]

    def kill(self, name: str) -> int:
        """kill -9 of ``name``; returns the number of workflows in flight at that moment (the
        log's started minus ended, as the tail had read it)."""
        role = self.roles[name]
        role.proc.send_signal(signal.SIGKILL)
        in_flight = self.events.in_flight()
        role.proc.wait(30)
        assert role.proc.returncode == -signal.SIGKILL, role.proc.returncode
        return in_flight

    def submit(self, n: int) -> None:
        inputs = [wait_input(self.n + i) for i in range(n)]
        self.n += n
        self.submitted |= {s.workflow_id for s in self.env.submit("fault_flow", inputs)}

    def top_up(self, at_least: int, margin: int = 150) -> int:
        """Keep ``at_least + margin`` workflows submitted and not ended (submitting again as
        they end) until ``at_least`` and a little more are in flight: a fault fired right
        after still finds ``at_least``. A single submission is not enough on a slow machine:
        workflows end while the new ones wait to start."""

        def enough() -> bool:
            with self.events.lock:
                open_ = len(self.submitted - self.events.ended)
            if open_ < at_least + margin:
                self.submit(at_least + margin - open_)
            return self.events.in_flight() >= at_least + 20

        wait_until(
            enough,
            180,
            lambda: f"{at_least} in flight (have {self.events.in_flight()})",
            every_s=0.5,
        )
        return self.events.in_flight()

    def all_ended(self) -> bool:
        with self.events.lock:
            return self.submitted <= self.events.ended

    def output_probe(self, name: str) -> Callable[[float], float | None]:
        """``first(t)``: when ``name`` first produced output after ``t``, or None yet."""
        if name == "decider":
            return self.events.first_after
        if name in ("timers", "retry"):
            return lambda t: self.fires.first_after(t, retry=name == "retry")
        if name == "dispatcher":
            return self._first_dispatch
        return self._first_projected(name.removeprefix("projector-"))

    def _first_dispatch(self, at: float) -> float | None:
        """The dispatcher's output: the assignments topic grows past its end at the first
        poll after ``at`` (so to within one poll)."""
        end = self._assignment_end()
        base = self._dispatch_base.setdefault(at, end)
        return time.time() if end > base else None

    def _assignment_end(self) -> int:
        cons = consumer(kafka_connection(self.env.bootstrap), None)
        try:
            topic = assignment_topic(self.env.prefix, "default")
            parts = int(self.env.vars["ES_SCHED_DISPATCH_ASSIGNMENT_PARTITIONS"])
            return sum(
                cons.get_watermark_offsets(TopicPartition(topic, p), 10)[1] for p in range(parts)
            )
        finally:
            cons.close()

    def _first_projected(self, target: str) -> Callable[[float], float | None]:
        """The projector's output: its checkpoints advance past where they were at the
        first poll after ``at``."""
        seen: dict[float, int] = {}

        def first(at: float) -> float | None:
            store = bootstrap.store(self.env.settings, target)
            try:
                marks = projected(store, self.env.topics.events, list(range(PARTITIONS)))
            finally:
                store.close()
            have = sum((marks or {}).values())
            base = seen.setdefault(at, have)
            return time.time() if have > base else None

        return first

    def recovered(self, name: str, since: float, timeout_s: float = 180) -> float:
        """Seconds from ``since`` to ``name``'s first new output (observed, never asserted)."""
        first = self.output_probe(name)
        found: list[float] = []

        def check() -> bool:
            t = first(since)
            if t is not None:
                found.append(t)
            return bool(found)

        wait_until(check, timeout_s, f"{name}'s first output after {since}", every_s=0.2)
        return found[0] - since

    def close(self) -> None:
        """Stop every process (a stopped zombie is continued first) and the tails."""
        for role in self.roles.values():
            if role.proc.poll() is None:
                role.proc.send_signal(signal.SIGCONT)
            role.stop()
        for tail in self.tails:
            tail.close()
        for proxy in self.proxies.values():
            proxy.down()


@contextmanager
def system(workers: int = 3) -> Iterator[System]:
    """A started ``System``; its processes stopped and its schema and indices dropped after."""
    s = System()
    with dropped_schemas(s.env):
        try:
            s.start_all(workers)
            yield s
        finally:
            s.close()
