"""Seed N workflows into a private schema's read models through the real projection path.

Each workflow runs through the pure core (``es_sched.simulate.Simulation``: decide, evolve,
the runtime's own effects) with a scripted worker, so its events are the ones the decider
would write; an operator command (terminate, pause) is decided on top where the mix asks for
one. The events are folded by ``views.apply`` (the projectors' fold) and the rows written by
``PgStore.write`` in batches (COPY + version-guarded upserts), as the projector writes them.
No row is made by SQL of our own. The event archive is not written (no benchmarked route
reads it; it would triple the seeding time) and no checkpoint is (no Kafka offsets exist).

The mix, drawn from a seeded RNG per workflow (the same seed gives the same rows): eight
definition names with 2-10 SIMPLE tasks, two versions each, five tenants, one correlation id
per workflow (``order-<n>``), priorities 0-8, start times over the 30 days before
``EPOCH_END``; about 58 % COMPLETED (a tenth of them after a retried attempt), 18 % RUNNING
(a task held by the worker), 12 % FAILED (a terminal task failure), 8 % TERMINATED and 4 %
PAUSED (commands decided over a running workflow).

Two processes build rows (the core and the fold are CPU-bound); the parent writes. A marker
table (``bench_seed``) records what was seeded; ``seed`` reuses a schema whose marker matches
and otherwise drops and rebuilds it.
"""

from __future__ import annotations

import multiprocessing
import random
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
from sqlalchemy import text

from es_sched.domain import commands as c
from es_sched.domain.decide import decide
from es_sched.domain.ids import counter_ids
from es_sched.projections import views
from es_sched.projections.postgres.store import PgStore, engine_for
from es_sched.projections.store import Batch
from es_sched.settings import Settings
from es_sched.simulate import Simulation

GENERATOR = 2  # bump when the mix changes: a stored marker then no longer matches
EPOCH_END = datetime(2026, 11, 1, tzinfo=UTC)
CHUNK = 1000
# (name, tasks in version 1, weight)
DEFINITIONS = (
    ("order_fulfilment", 6, 30),
    ("invoice_run", 3, 15),
    ("media_transcode", 5, 15),
    ("etl_daily", 8, 10),
    ("kyc_check", 4, 10),
    ("email_campaign", 2, 10),
    ("report_build", 10, 5),
    ("refund", 3, 5),
)
TENANTS = ("acme", "globex", "initech", "umbrella", "hooli")
OUTCOMES = (("COMPLETED", 58), ("RUNNING", 18), ("FAILED", 12), ("TERMINATED", 8), ("PAUSED", 4))


def definition(name: str, steps: int, version: int) -> dict[str, Any]:
    tasks = [
        {
            "name": f"{name}.step{i}",
            "taskReferenceName": f"step{i}",
            "type": "SIMPLE",
            "inputParameters": {"order": "${workflow.input.order}", "n": i},
        }
        for i in range(steps + version - 1)
    ]
    return {"name": name, "version": version, "schemaVersion": 2, "tasks": tasks}


def taskdefs(name: str, steps: int) -> list[dict[str, Any]]:
    return [
        # No response or total timeout: a task the worker holds stays IN_PROGRESS (the
        # simulation would otherwise move its clock to the timeout and time the task out).
        {
            "name": f"{name}.step{i}",
            "retryCount": 2,
            "retryLogic": "FIXED",
            "retryDelaySeconds": 5,
            "responseTimeoutSeconds": 0,
            "timeoutSeconds": 0,
        }
        for i in range(steps + 1)
    ]


def task_types() -> list[str]:
    """Every task type the seed's definitions use (the batch poll's types)."""
    return [f"{name}.step{i}" for name, steps, _ in DEFINITIONS for i in range(steps + 1)]


class _Sim(Simulation):
    """The simulation with the start's tenant, correlation id and priority set."""

    start_extra: dict[str, Any] = {}  # noqa: RUF012 (set per instance before run)

    def _start(
        self, wf_id: str, definition: dict[str, Any], inp: dict[str, Any], **extra: Any
    ) -> c.StartWorkflow:
        return super()._start(wf_id, definition, inp, **{**self.start_extra, **extra})


def _pick(rng: random.Random, weighted: tuple[tuple[Any, ...], ...]) -> tuple[Any, ...]:
    return rng.choices(weighted, weights=[w[-1] for w in weighted])[0]


def workflow_id(seed: int, n: int) -> str:
    rng = random.Random(f"{seed}-id-{n}")  # noqa: S311 (reproducible data, no secret)
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def events_of(seed: int, n: int) -> list[Any]:
    """Workflow ``n``'s history: the pure core's events for its drawn shape and outcome."""
    rng = random.Random(f"{seed}-{n}")  # noqa: S311 (reproducible data, no secret)
    name, steps, _ = _pick(rng, DEFINITIONS)
    version = 1 + (rng.random() < 0.3)
    outcome = _pick(rng, OUTCOMES)[0]
    d = definition(name, steps, version)
    length = len(d["tasks"])
    at = rng.randrange(length)
    script: list[dict[str, Any]] = []
    if outcome == "FAILED":
        script = [
            {
                "ref": f"step{at}",
                "status": "FAILED_WITH_TERMINAL_ERROR",
                "output": {"reason": "card declined"},
            }
        ]
    elif outcome in ("RUNNING", "TERMINATED", "PAUSED"):
        script = [{"ref": f"step{at}", "status": "IN_PROGRESS"}]
    elif rng.random() < 0.1:
        script = [{"ref": f"step{at}", "attempt": 1, "status": "FAILED", "output": {}}]
    wf = workflow_id(seed, n)
    start = EPOCH_END - timedelta(seconds=rng.randrange(30 * 86400))
    sim = _Sim([d], taskdefs(name, steps), script=script, start=start)
    sim.start_extra = {
        "tenant": rng.choice(TENANTS),
        "correlation_id": f"order-{n}",
        "priority": rng.randrange(9),
    }
    sim.ids, sim.input_ids = counter_ids(f"{wf}-t"), counter_ids(f"{wf}-in")
    sim.wf_ids = lambda: wf
    sim.run(d, {"order": f"order-{n}", "amount": rng.randrange(1, 10_000)})
    done = sim.workflows[wf]
    events = list(done.events)
    command: c.Input | None = None
    if outcome == "TERMINATED":
        command = c.TerminateWorkflow(f"{wf}-op", wf, reason="terminated by an operator")
    elif outcome == "PAUSED":
        command = c.PauseWorkflow(f"{wf}-op", wf)
    if command is not None and done.state is not None:
        later = sim.now + timedelta(seconds=rng.randrange(1, 600))
        events += decide(done.state, command, later, sim.ids, None)
    return events


def rows_of_chunk(job: tuple[int, int, int]) -> tuple[list[views.Row], list[views.Row], int]:
    """Workflows ``[start, stop)`` of ``seed`` folded by the projectors' fold: their rows."""
    seed, start, stop = job
    workflows: list[views.Row] = []
    tasks: list[views.Row] = []
    count = 0
    for n in range(start, stop):
        events = events_of(seed, n)
        count += len(events)
        rows = views.fold_rows(events)
        assert rows is not None, f"workflow {n} did not start"
        workflows.append(rows.workflow)
        tasks.extend(rows.tasks.values())
    return workflows, tasks, count


@dataclass
class Seeded:
    schema: str
    workflows: int
    tasks: int
    events: int
    seconds: float
    reused: bool

    @property
    def rate(self) -> float:
        return self.workflows / self.seconds if self.seconds else 0.0


def _marker(spec: dict[str, Any]) -> str:
    return orjson.dumps(spec, option=orjson.OPT_SORT_KEYS).decode()


def stored_marker(settings: Settings, schema: str) -> dict[str, Any] | None:
    engine = engine_for(settings, schema)
    try:
        with engine.connect() as conn:
            found = conn.execute(
                text("SELECT to_regclass(:t)"), {"t": f'"{schema}".bench_seed'}
            ).scalar()
            if found is None:
                return None
            value = conn.execute(text("SELECT spec FROM bench_seed")).scalar()
            return orjson.loads(value) if value else None
    finally:
        engine.dispose()


def seed(
    settings: Settings,
    workflows: int,
    seed_value: int = 1,
    processes: int = 2,
    progress: Callable[[int], None] | None = None,
) -> Seeded:
    """Seed ``workflows`` into ``settings``' schema, or reuse it if its marker matches."""
    schema = settings.postgres.schema_name
    spec = {"generator": GENERATOR, "workflows": workflows, "seed": seed_value}
    marker = stored_marker(settings, schema)
    if marker is not None and marker.get("spec") == spec:
        # Upgraded to the newest migration: a schema seeded before an index was added would
        # be measured without it (one seeded at 0002 lacked the correlation id's index).
        reused = PgStore(settings)
        reused.ensure()
        reused.engine.dispose()
        return Seeded(schema, workflows, marker["tasks"], marker["events"], 0.0, reused=True)
    admin = engine_for(settings, "public")
    with admin.begin() as conn:
        conn.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
    admin.dispose()
    store = PgStore(settings)
    store.ensure()
    started = time.monotonic()
    n_tasks = n_events = 0
    jobs = [(seed_value, s, min(s + CHUNK, workflows)) for s in range(0, workflows, CHUNK)]
    try:
        for wfs, tasks, events in _chunks(jobs, processes):
            store.write(
                "bench-seed",
                Batch(
                    workflows={w["workflow_id"]: w for w in wfs},
                    tasks={t["task_id"]: t for t in tasks},
                ),
            )
            n_tasks, n_events = n_tasks + len(tasks), n_events + events
            if progress is not None:
                progress(len(wfs))
        seconds = time.monotonic() - started
        with store.engine.begin() as conn:
            conn.execute(text("ANALYZE workflows; ANALYZE tasks"))
            conn.execute(text("CREATE TABLE bench_seed (spec text NOT NULL)"))
            done = {"spec": spec, "tasks": n_tasks, "events": n_events}
            conn.execute(text("INSERT INTO bench_seed VALUES (:s)"), {"s": _marker(done)})
    finally:
        store.close()
    return Seeded(schema, workflows, n_tasks, n_events, seconds, reused=False)


def _chunks(
    jobs: list[tuple[int, int, int]], processes: int
) -> Iterator[tuple[list[views.Row], list[views.Row], int]]:
    if processes <= 1:
        yield from map(rows_of_chunk, jobs)
        return
    with multiprocessing.get_context("fork").Pool(processes) as pool:
        yield from pool.imap(rows_of_chunk, jobs)


def sample_ids(seed_value: int, workflows: int, count: int) -> list[str]:
    """``count`` seeded workflow ids, spread over the whole range (the detail route's ids)."""
    rng = random.Random(f"{seed_value}-sample")  # noqa: S311 (reproducible data)
    return [workflow_id(seed_value, rng.randrange(workflows)) for _ in range(count)]
