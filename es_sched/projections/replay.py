"""The auditors: fold the log from offset 0 and compare what the stores say with it.

``replay`` reads every committed record of the events topic from the start (up to a time, for
one workflow or all) and folds it with ``domain.evolve`` — the decider's own core, not the
projectors' ``views.apply`` — so a bug in the projection fold shows up as a mismatch instead of
being repeated. ``verify`` turns each folded state into rows (``views.rows_of``) and compares
them, field by field, with a store's rows (PostgreSQL, the search engine) and with the
decider's changelog snapshots. Refusals outside any history (``workflow.rejected``, ADR 11)
are counted and checked (seq 0, the id of their input) but not folded: they are no workflow's
state, so no store holds a row for them. With ``until``, only workflows whose whole history is
before that time are compared (the stores hold the present).

Speed (ADR 32): one Kafka reader serves all the partitions it reads; a large log is split into
partition groups folded by forked worker processes (``parallelism``), whose states merge by
union since a workflow lives on one partition; ``verify_all`` compares the targets on threads
of their own, so their waits overlap.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from multiprocessing import get_context
from typing import Any

from confluent_kafka import TopicPartition
from sqlalchemy import inspect

from es_sched.domain.events import Event
from es_sched.domain.evolve import advance
from es_sched.domain.ids import refusal_event_id
from es_sched.domain.refusals import REFUSAL_SEQ, is_refusal
from es_sched.domain.retention import Ended
from es_sched.domain.state import WorkflowState
from es_sched.errors import DomainError, EsSchedError
from es_sched.kafka.clients import consumer, read_partitions, watermarks
from es_sched.kafka.connection import connection
from es_sched.kafka.topics import topics_for
from es_sched.projections.postgres import queries as pg_queries
from es_sched.projections.postgres.store import PgStore
from es_sched.projections.search.client import SearchError
from es_sched.projections.store import Store
from es_sched.projections.views import Row, comparable, rows_of
from es_sched.serialization import decode_logged_event
from es_sched.serialization.changelog import Changelog
from es_sched.settings import Settings
from es_sched.tuning import tune_gc

Progress = Callable[[int], None]  # records read so far
CHUNK = 2000
PER_WORKER = 20_000  # records that pay for a replay process (its reader, its result's pickle)


@dataclass
class Replayed:
    states: dict[str, WorkflowState] = field(default_factory=dict)
    last_at: dict[str, datetime] = field(default_factory=dict)  # workflow -> its last event
    cut: set[str] = field(default_factory=set)  # workflows with events after ``until``
    events: int = 0
    refusals: int = 0  # workflow.rejected records: outside any history, checked, not folded
    seconds: float = 0.0
    problems: list[str] = field(default_factory=list)  # histories the core refused
    # The fold's rows (``views.rows_of``), made once for the targets that compare them.
    _rows: dict[str, tuple[Row, list[Row]]] = field(default_factory=dict, repr=False, compare=False)

    def rows(self, workflow_id: str) -> tuple[Row, list[Row]]:
        """``rows_of`` the folded state, kept: each target compares the same rows (threads
        may make one twice, equal; the comparisons only read them)."""
        rows = self._rows.get(workflow_id)
        if rows is None:
            rows = self._rows[workflow_id] = rows_of(self.states[workflow_id])
        return rows


@dataclass(frozen=True)
class Mismatch:
    source: str  # "pg" | "search" | "changelog"
    kind: str  # "workflow" | "task"
    id: str
    field: str  # a column, or "missing" / "unexpected"
    log: Any
    store: Any

    def line(self) -> str:
        where = f"{self.source} {self.kind} {self.id} {self.field}"
        return f"{where}: log={self.log!r} store={self.store!r}"


def partitions(settings: Settings) -> list[int]:
    c = consumer(connection(settings.kafka), None)
    try:
        meta = c.list_topics(topics_for(settings).events, timeout=30)
        return sorted(meta.topics[topics_for(settings).events].partitions)
    finally:
        c.close()


def replay(
    settings: Settings,
    until: datetime | None = None,
    workflow_id: str | None = None,
    progress: Progress | None = None,
    workers: int | None = None,
) -> Replayed:
    """The fold of the whole log (or of ``workflow_id``). ``workers``: processes folding one
    group of partitions each (a workflow lives on one partition, so the groups' states are
    disjoint and merge by union); None picks ``parallelism`` for the log's size."""
    tune_gc(settings.runtime.gc_young_threshold)  # folds the whole log: es_sched.tuning
    parts = partitions(settings)
    if workers is None:
        workers = 1 if workflow_id is not None else parallelism(events_total(settings))
    workers = max(1, min(workers, len(parts)))
    if workers == 1:
        return _replay(settings, parts, until, workflow_id, progress)
    started, out = time.monotonic(), Replayed()
    groups = [parts[i::workers] for i in range(workers)]
    # Forked, not spawned: a child inherits the imports (spawning one costs a second of them,
    # and would run ``python -m es_sched``'s main again); no Kafka client or database
    # connection is open here to be shared, each child opens its own reader.
    with ProcessPoolExecutor(workers, mp_context=get_context("fork")) as pool:
        futures = [pool.submit(_replay, settings, g, until, workflow_id, None) for g in groups]
        for future in futures:
            part = future.result()
            out.states.update(part.states)
            out.last_at.update(part.last_at)
            out.cut |= part.cut
            out.events, out.refusals = out.events + part.events, out.refusals + part.refusals
            out.problems += part.problems
            if progress is not None:
                progress(out.events + out.refusals)
    out.seconds = time.monotonic() - started
    return out


def parallelism(records: int, per_core: int = 1) -> int:
    """Processes worth starting for ``records`` events: ``per_core`` per core, when each gets
    enough records to pay for its start."""
    return max(1, min((os.cpu_count() or 1) * per_core, records // PER_WORKER))


def _replay(
    settings: Settings,
    parts: list[int],
    until: datetime | None,
    workflow_id: str | None,
    progress: Progress | None,
) -> Replayed:
    topic = topics_for(settings).events
    out, started, key = Replayed(), time.monotonic(), workflow_id.encode() if workflow_id else None
    read = 0
    # One reader for every partition (a client per partition pays its start-up each time,
    # which dominated a replay: ADR 21); each partition's order is kept, and a
    # workflow lives on one partition, so every history is folded in order.
    for msg in read_partitions(connection(settings.kafka), topic, parts):
        read += 1
        if progress is not None and read % 5000 == 0:
            progress(read)
        if key is not None and msg.key() != key:
            continue
        raw = msg.value()
        event = decode_logged_event(raw if isinstance(raw, bytes) else b"")
        if until is not None and event.occurred_at > until:
            out.cut.add(event.workflow_id)
            continue
        wf = event.workflow_id
        if is_refusal(event):
            _check_refusal(event, f"{topic}[{msg.partition()}]@{msg.offset()}")
            out.refusals += 1
            continue
        if wf in out.problems:
            continue
        try:
            out.states[wf] = advance(out.states.get(wf), event)
        except (DomainError, EsSchedError) as exc:
            out.problems.append(wf)
            out.states.pop(wf, None)
            raise EsSchedError(f"{topic}[{msg.partition()}]@{msg.offset()}: {exc}") from exc
        out.last_at[wf] = event.occurred_at
        out.events += 1
    if progress is not None:
        progress(read)
    out.seconds = time.monotonic() - started
    return out


def _check_refusal(event: Event, where: str) -> None:
    """A refusal is outside every history (ADR 11): seq 0 and the id of its input, or the log
    is not what the decider writes."""
    want = refusal_event_id(event.workflow_id, event.causation_id)
    if event.seq != REFUSAL_SEQ or event.event_id != want:
        raise EsSchedError(
            f"{where}: {event.type} of {event.workflow_id} has seq {event.seq} and id "
            f"{event.event_id}; a refusal has seq {REFUSAL_SEQ} and id {want}"
        )


def _compare(source: str, kind: str, key: str, want: Row, have: Row | None) -> Iterator[Mismatch]:
    if have is None:
        yield Mismatch(source, kind, key, "missing", "row", None)
        return
    # Equal rows are equal comparables: most rows take this exit and skip ``comparable``.
    if want == (have if kind != "task" else {**have, "version": want.get("version")}):
        return
    w, h = comparable(want), comparable(have)
    for name, value in w.items():
        if kind == "task" and name == "version":
            continue  # the folded state does not keep which event last changed a task
        if h.get(name) != value:
            yield Mismatch(source, kind, key, name, value, h.get(name))


def verify_store(
    replayed: Replayed, store: Store, ids: list[str], total_in_store: int | None = None
) -> list[Mismatch]:
    """Compare ``ids`` (workflows of the replay) with the store's rows."""
    found: list[Mismatch] = []
    for i in range(0, len(ids), CHUNK):
        chunk = ids[i : i + CHUNK]
        stored = store.load(chunk)
        for wf in chunk:
            want_wf, want_tasks = replayed.rows(wf)
            rows = stored.get(wf)
            found += _compare(store.name, "workflow", wf, want_wf, rows.workflow if rows else None)
            if rows is None:
                continue
            for t in want_tasks:
                found += _compare(store.name, "task", t["task_id"], t, rows.tasks.get(t["task_id"]))
            for extra in set(rows.tasks) - {t["task_id"] for t in want_tasks}:
                found.append(Mismatch(store.name, "task", extra, "unexpected", None, "row"))
    if (
        total_in_store is not None
        and total_in_store != len(replayed.states)
        and len(ids) == len(replayed.states)
    ):
        found.append(
            Mismatch(store.name, "workflow", "*", "count", len(replayed.states), total_in_store)
        )
    return found


@dataclass
class Snapshots:
    """What the changelog holds: each live workflow's latest snapshot, decoded, and the ended
    markers of retired ones (ADR 18)."""

    latest: dict[str, WorkflowState] = field(default_factory=dict)
    ended: dict[str, Ended] = field(default_factory=dict)
    # the latest snapshot's ended header (ADR 52): what a decider restores it from, undecoded
    endings: dict[str, tuple[str, int, datetime]] = field(default_factory=dict)


def read_changelog(settings: Settings, parts: list[int] | None = None) -> Snapshots:
    """The changelog's ``parts`` (default all; a workflow's snapshots are on the partition of
    its events, both keyed by its id), each key's last record: the topic is compacted, but not
    at once. Needs no fold, so ``replay --verify`` reads it while the events are folded."""
    out, logs = Snapshots(), dict[int, Changelog]()  # each partition's records, in order
    topic, bootstrap = topics_for(settings).changelog, connection(settings.kafka)
    for msg in read_partitions(bootstrap, topic, parts or partitions(settings)):
        changelog = logs.setdefault(msg.partition() or 0, Changelog())
        key, value = msg.key(), msg.value()
        changelog.feed(
            key.decode() if isinstance(key, bytes) else str(key),
            value.encode() if isinstance(value, str) else value,
            msg.headers(),
        )
    for changelog in logs.values():
        out.ended.update(changelog.ended)
        out.endings.update(changelog.endings)
        out.latest.update({st.workflow_id: st for st in changelog.states()})
    return out


def verify_changelog(
    settings: Settings,
    replayed: Replayed,
    ids: set[str],
    parts: list[int] | None = None,
    snapshots: Snapshots | None = None,
) -> list[Mismatch]:
    """The decider's latest snapshot of each workflow of ``ids`` against the fold of its
    events; ``snapshots``: the changelog read already (default: read ``parts`` now)."""
    snaps = snapshots if snapshots is not None else read_changelog(settings, parts)
    found: list[Mismatch] = []
    for wf in sorted(ids):
        gone, folded = snaps.ended.get(wf), replayed.states[wf]
        if gone is not None:  # retired (ADR 18): its marker must say how the history ended
            want = {"status": folded.status, "seq": folded.seq}
            found += _compare(
                "changelog", "ended", wf, want, {"status": gone.status, "seq": gone.seq}
            )
            continue
        snap = snaps.latest.get(wf)
        if snap is None:
            found.append(Mismatch("changelog", "workflow", wf, "missing", "state", None))
            continue
        ending = snaps.endings.get(wf)
        if ending is not None:  # what a restore keeps it by, undecoded (ADR 52)
            want = {"status": folded.status, "seq": folded.seq, "ended_at": folded.ended_at}
            header = dict(zip(("status", "seq", "ended_at"), ending, strict=True))
            found += _compare("changelog", "ending", wf, want, header)
        want_wf, want_tasks = replayed.rows(wf)
        have_wf, have_tasks = rows_of(snap)
        found += _compare("changelog", "workflow", wf, want_wf, have_wf)
        have = {t["task_id"]: t for t in have_tasks}
        for t in want_tasks:
            found += _compare("changelog", "task", t["task_id"], t, have.get(t["task_id"]))
    return found


def verify_all(
    settings: Settings,
    replayed: Replayed,
    ids: list[str],
    targets: tuple[str, ...],
    store_for: Callable[[str], Store],
    whole: bool,
) -> list[Mismatch]:
    """``replay --verify``: each target ("pg", "search", "changelog") compared on its own
    thread, so one's waits (a search page, the changelog's fetches, PostgreSQL's rows) overlap
    the others' work; the mismatches in the order of ``targets``. ``whole``: every workflow of
    the log is compared, so PostgreSQL's row count must equal theirs. An error of one target
    is raised after every target ended."""

    def one(target: str) -> list[Mismatch]:
        if target == "changelog":
            return verify_changelog(settings, replayed, set(ids))
        store = store_for(target)
        try:
            total = None
            if whole and isinstance(store, PgStore):
                total = pg_queries.total_workflows(store.engine)
            return verify_store(replayed, store, ids, total)
        finally:
            store.close()

    with ThreadPoolExecutor(len(targets), thread_name_prefix="verify") as pool:
        futures = [pool.submit(one, target) for target in targets]
    return [m for f in futures for m in f.result()]


def comparable_ids(replayed: Replayed, until: datetime | None) -> list[str]:
    """Workflows whose whole history the replay saw (all of them without ``until``)."""
    if until is None:
        return sorted(replayed.states)
    return sorted(wf for wf in replayed.states if wf not in replayed.cut)


def events_total(settings: Settings) -> int:
    """Records in the events topic (for progress bars)."""
    topic, c = topics_for(settings).events, consumer(connection(settings.kafka), None)
    try:
        total = 0
        for part in partitions(settings):
            low, high = watermarks(c, TopicPartition(topic, part))
            total += high - low
        return total
    finally:
        c.close()


def projected(store: Store, topic: str, parts: list[int]) -> dict[int, int] | None:
    """Which offsets of ``topic`` the store reflects (partition -> next offset); None when
    it holds no projection at all (its schema or index was never created), so an auditor
    can tell a read model that is absent from one that is wrong."""
    if isinstance(store, PgStore) and not inspect(store.engine).has_table(
        "checkpoints", schema=store.schema
    ):
        return None
    try:
        return store.checkpoints(topic, parts) or None
    except SearchError as exc:
        if exc.kind == "index_not_found_exception":
            return None
        raise
