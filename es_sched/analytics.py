"""The analytics role: faust-streaming agents over the events topic (ADR 64).

``es-sched run --role analytics`` (in ``run``'s default set). The figures are folded by
``es_sched.domain.analytics``; the agents here only move records and keep faust tables:

- ``tasks`` agent, over ``<prefix>.events`` (decoded by ``serialization.codec``): keeps what is
  remembered of each task between its events in the table ``tasks`` (key: task id), and when
  an attempt ends sends its ``Outcome`` to ``<prefix>.analytics-outcomes``, keyed by task type.
  The events topic is partitioned by workflow id and a task's events are its workflow's, so a
  task id always lands in the same partition: the table is co-partitioned with its input.
- ``windows`` agent, over the outcomes topic: folds each outcome into a tumbling windowed table
  ``windows`` (key: the stats key, window ``ES_SCHED_ANALYTICS_WINDOW_S``, on the event time of
  the task's end). Every key of one task type lives on one partition (the repartition above),
  so one process owns a key and no two write it.
- a timer publishes the keys whose window changed, at most once per
  ``ES_SCHED_ANALYTICS_PUBLISH_INTERVAL_S``, as ``RunStats`` / ``FailureRate`` JSON on the
  compacted ``<prefix>.stats`` (key ``stats_key``), through faust's producer.

Worker host and version are not in the task events: the role reads the workers' liveness
records on ``<prefix>.system`` (ADR 61: host and version of each worker id) and copies them
into a task's facts when it is dispatched.

Delivery: at-least-once (faust's ``processing_guarantee``; its exactly-once mode has open loss
and duplicate bugs, ADR 64). Offsets are committed by faust after the agents took the records;
both tables are changelog-backed (``<prefix>.analytics-tasks-changelog``,
``<prefix>.analytics-windows-changelog``) and recovered from them on start. A repeated input
can count an outcome twice in a window; the output is advice on the stats topic, never workflow
state, and whoever uses it records the value it used.

faust's own topics are all named ``<prefix>.analytics-*`` (its app id), so two deployments on
one cluster never share them and a test's cleanup of its prefix removes them.
"""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
import tempfile
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import faust
from faust.tables.wrappers import WindowWrapper
from faust.types import EventT

from es_sched.domain import analytics as fold
from es_sched.domain.events import Event
from es_sched.domain.learned import FailureRate, Kind, RunStats, stats_key, to_record
from es_sched.errors import EsSchedError, InfrastructureError
from es_sched.kafka import roster
from es_sched.kafka.connection import KafkaConnection, connection
from es_sched.kafka.topics import ensure_topics, topics_for
from es_sched.metrics import Registry
from es_sched.serialization.codec import decode_event
from es_sched.settings import Settings

log = logging.getLogger(__name__)
STOP_POLL_S = 0.2
# faust's App.stop waits for its consumer to commit and leave the group; with the app's internal
# topics deleted under it (an operator's cleanup, a test's teardown) it retries "topic not
# found" without end. A role must stop when asked, inside ``es-sched run``'s STOP_GRACE_S.
FAUST_STOP_S = 10.0
Pending = tuple[Kind, str, str, float, dict[str, Any]]


def app_id(prefix: str) -> str:
    """faust's app id, the prefix of every topic it creates and its consumer group."""
    return f"{prefix}.analytics"


def _broker(bootstrap: KafkaConnection) -> list[str]:
    servers = bootstrap.bootstrap_servers.split(",")
    return [f"kafka://{b.strip()}" for b in servers if b.strip()]


def _ended_at(event: EventT[Any] | None) -> float:
    """The event time of an outcome record (windows are never read outside an agent)."""
    if event is None:
        raise EsSchedError("analytics: a window was read outside of an outcome's processing")
    value: Any = event.value
    return float(value["ended_at"])


class Analytics:
    """The role: a faust app in its own event loop, in the thread ``es-sched run`` gives it."""

    def __init__(self, settings: Settings, registry: Registry | None = None) -> None:
        self.settings = settings
        self.topics = topics_for(settings)
        registry = registry or Registry()
        self._events = registry.counter(
            "es_sched_analytics_events_total", "Events the analytics role folded"
        )
        self._undecodable = registry.counter(
            "es_sched_analytics_undecodable_total",
            "Events the analytics role could not decode and skipped",
        )
        self._outcomes = registry.counter(
            "es_sched_analytics_outcomes_total", "Task attempts that ended, by outcome"
        )
        self._published = registry.counter(
            "es_sched_analytics_published_total", "Proposals published on the stats topic"
        )
        self.workers: dict[str, tuple[str, str]] = {}  # worker id -> (host, version)
        self._pending: dict[str, Pending] = {}
        self._datadir = ""

    def run(self, stop: threading.Event) -> None:
        self._datadir = tempfile.mkdtemp(prefix="es-sched-analytics-")
        try:
            self._run(stop)
        finally:
            shutil.rmtree(self._datadir, ignore_errors=True)

    def _run(self, stop: threading.Event) -> None:
        ensure_topics(connection(self.settings.kafka), self.topics)
        reader = roster.RosterReader(connection(self.settings.kafka), self.topics.system)
        try:
            reader.catch_up()
            self._learn_workers(reader)
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self._main(stop, reader))
            finally:
                loop.close()
        finally:
            reader.close()

    async def _main(self, stop: threading.Event, reader: roster.RosterReader) -> None:
        app = self._build(reader)
        # Started beside the stop check: a broker that does not answer keeps faust starting,
        # and a stop request must still end the role.
        starting = asyncio.ensure_future(app.start())
        try:
            while not stop.is_set():
                if starting.done() and starting.exception() is not None:
                    raise EsSchedError(f"analytics: faust did not start: {starting.exception()!r}")
                if app._crashed.is_set():  # mode's only crash signal
                    raise EsSchedError(f"analytics: faust app crashed: {app.crash_reason!r}")
                await asyncio.sleep(STOP_POLL_S)
        finally:
            if not starting.done():
                starting.cancel()
            try:
                await asyncio.wait_for(app.stop(), FAUST_STOP_S)
            except TimeoutError:
                log.warning(
                    "analytics: faust did not stop within %.0fs (were its internal topics "
                    "deleted?); leaving it behind",
                    FAUST_STOP_S,
                )

    def _learn_workers(self, reader: roster.RosterReader) -> None:
        for p in reader.records():
            if p.role == "worker":
                self.workers[p.instance] = (p.host, p.version)

    def _build(self, reader: roster.RosterReader) -> faust.App:
        k, a = self.settings.kafka, self.settings.analytics
        name = app_id(k.topic_prefix)
        kafka = connection(k)
        app = faust.App(
            name,
            # The memory store keeps nothing on disk, but faust still makes its data directory.
            datadir=self._datadir,
            broker=_broker(kafka),
            broker_credentials=kafka.faust_credentials(),
            store="memory://",  # the changelog topics are the tables' durable copy
            processing_guarantee="at_least_once",
            web_enabled=False,
            autodiscover=False,
            topic_partitions=k.partitions,
            topic_replication_factor=k.replication_factor or 1,
            consumer_auto_offset_reset="earliest",
            table_cleanup_interval=max(1.0, min(a.window_s, 30.0)),
            key_serializer="json",
            value_serializer="json",
        )
        events = app.topic(self.topics.events, key_serializer="raw", value_serializer="raw")
        outcomes = app.topic(
            f"{name}-outcomes", internal=True, partitions=k.partitions, key_serializer="raw"
        )
        stats = app.topic(self.topics.stats, key_serializer="raw", value_serializer="raw")
        tasks = app.Table("tasks", partitions=k.partitions)
        wrapper = app.Table("windows", default=dict, partitions=k.partitions).tumbling(
            timedelta(seconds=a.window_s), expires=timedelta(seconds=a.window_s * a.keep_windows)
        )
        # Event time: the window an outcome falls in is the one its task ended in.
        windows = cast(WindowWrapper, wrapper).relative_to(_ended_at)

        @app.agent(events, name="tasks")
        async def fold_tasks(stream: faust.StreamT[bytes]) -> None:
            async for raw in stream:
                event = self._decode(raw)
                if event is None:
                    continue
                task_id = getattr(event.payload, "task_id", None)
                if not isinstance(task_id, str):
                    continue  # a workflow event: nothing of a task's run
                before = tasks.get(task_id)
                after, outcome = fold.track(before, event, self.workers)
                if after is None:
                    if before is not None:
                        del tasks[task_id]
                elif after != before:
                    tasks[task_id] = after
                if outcome is not None:
                    self._outcomes.inc(outcome="ok" if outcome.ok else "failed")
                    await outcomes.send(key=outcome.task_type.encode(), value=outcome.to_record())

        @app.agent(outcomes, name="windows")
        async def fold_windows(stream: faust.StreamT[dict[str, Any]]) -> None:
            async for doc in stream:
                outcome = fold.Outcome.from_record(doc)
                end = fold.window_start(outcome.ended_at, a.window_s) + a.window_s
                for kind, subject in fold.subjects(outcome):
                    key = stats_key(kind, outcome.task_type, subject)
                    acc = fold.add(windows[key].current() or None, kind, outcome, a.sample_size)
                    windows[key] = acc
                    self._pending[key] = (kind, outcome.task_type, subject, end, acc)

        async def publish() -> None:
            try:
                reader.poll()
                self._learn_workers(reader)
            except InfrastructureError as exc:  # advice only: keep the workers we know
                log.warning("analytics: worker records: %s", exc)
            for key, figures in self._due(time.time()):
                await stats.send(key=key.encode(), value=json.dumps(to_record(figures)).encode())
                self._published.inc()

        app.timer(a.publish_interval_s)(publish)
        return app

    def _due(self, now: float) -> list[tuple[str, RunStats | FailureRate]]:
        """The proposals to publish now: each key whose window changed since the last tick,
        unless its window closed longer ago than the windows are kept (a restart reading old
        history proposes nothing stale)."""
        a = self.settings.analytics
        pending, self._pending = self._pending, {}
        out: list[tuple[str, RunStats | FailureRate]] = []
        for key, (kind, task_type, subject, end, acc) in sorted(pending.items()):
            if end < now - a.window_s * a.keep_windows:
                continue
            window_end = datetime.fromtimestamp(end, UTC)
            out.append((key, fold.figures(acc, kind, task_type, subject, window_end)))
        return out

    def _decode(self, raw: bytes) -> Event | None:
        self._events.inc()
        try:
            return decode_event(raw)
        except EsSchedError as exc:
            # Not ours to refuse: the projectors dead-letter an undecodable event; advice
            # goes on without it.
            self._undecodable.inc()
            log.warning("analytics: undecodable event skipped: %s", exc)
            return None
