"""The search store against a real engine: the local OpenSearch 2, and Elasticsearch 8 through
testcontainers (skipped, with the reason, where no Docker engine answers).

Rows come from the golden histories folded by ``views.fold_rows``; each test works under its
own index prefix and deletes its indices at the end.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import datetime

import pytest

from es_sched.errors import EsSchedError
from es_sched.projections.search.client import SearchError
from es_sched.projections.search.store import SearchStore
from es_sched.projections.store import Batch, Store, StoreUnavailable
from es_sched.projections.views import Rows, fold_rows
from es_sched.settings import Settings
from testkit.golden import NAMES, history
from testkit.settings import settings_with
from tests.integration.backends import Backend

pytestmark = pytest.mark.integration

TOPIC = "es-sched-events"


def settings_for(url: str, flavor: str, prefix: str) -> Settings:
    return settings_with(
        {
            "ES_SCHED_SEARCH_URL": url,
            "ES_SCHED_SEARCH_FLAVOR": flavor,
            "ES_SCHED_SEARCH_INDEX_PREFIX": prefix,
        }
    )


def rows_after(name: str, count: int | None = None, suffix: str = "") -> Rows:
    """The rows after the first ``count`` events; ``suffix`` renames the workflow and its
    tasks, so two histories (which share ids) can sit in one index."""
    rows = fold_rows(history(name)[:count])
    assert rows is not None
    if not suffix:
        return rows
    tasks = [
        {**t, "workflow_id": t["workflow_id"] + suffix, "task_id": t["task_id"] + suffix}
        for t in rows.tasks.values()
    ]
    return Rows.load({**rows.workflow, "workflow_id": rows.workflow["workflow_id"] + suffix}, tasks)


def batch_of(rows: Rows, checkpoints: dict[int, int] | None = None) -> Batch:
    workflows = {rows.workflow["workflow_id"]: rows.workflow}
    return Batch(workflows=workflows, tasks=dict(rows.tasks), checkpoints=checkpoints or {})


def assert_same(loaded: Rows, expected: Rows) -> None:
    assert loaded.workflow == expected.workflow
    assert loaded.tasks == expected.tasks
    assert loaded.by_ref == expected.by_ref


@pytest.fixture
def store(backend: Backend, unique: str) -> Iterator[SearchStore]:
    live = SearchStore(settings_for(backend.search_url, backend.search_flavor, unique))
    live.ensure()
    try:
        yield live
    finally:
        live.drop()
        live.close()


def test_the_store_is_a_store_port(store: SearchStore) -> None:
    port: Store = store  # mypy checks the protocol; the name is what checkpoints are kept under
    assert (port.name, store.current_generation()) == ("search", "g1")


@pytest.mark.parametrize("name", NAMES)
def test_rows_written_then_loaded_are_the_rows(store: SearchStore, name: str) -> None:
    rows = rows_after(name)
    store.write(TOPIC, batch_of(rows))
    loaded = store.load(["wf-1", "wf-absent"])
    assert list(loaded) == ["wf-1"]
    assert_same(loaded["wf-1"], rows)
    assert isinstance(loaded["wf-1"].workflow["created_at"], datetime)
    assert store.get_workflow("wf-1") == rows.workflow
    assert store.get_workflow("wf-absent") is None


def test_tasks_beyond_one_page_are_all_loaded(store: SearchStore) -> None:
    rows = rows_after("media_transcode_exhausted")
    store.page_size = 3  # 10 task rows: four pages of search_after
    store.write(TOPIC, batch_of(rows))
    assert len(rows.tasks) == 10
    assert_same(store.load(["wf-1"])["wf-1"], rows)


def test_an_older_version_written_after_a_newer_one_leaves_the_newer(store: SearchStore) -> None:
    older, newer = rows_after("media_480", 11), rows_after("media_480")
    assert older.workflow["version"] < newer.workflow["version"]
    store.write(TOPIC, batch_of(newer))
    store.write(TOPIC, batch_of(older))  # refused by the engine with 409s: not an error
    assert_same(store.load(["wf-1"])["wf-1"], newer)


def test_a_stale_batch_redelivered_changes_nothing(store: SearchStore) -> None:
    first, second = rows_after("media_480", 17), rows_after("media_480")
    store.write(TOPIC, batch_of(first, {0: 17}))
    store.write(TOPIC, batch_of(second, {0: 28}))
    for stale in (batch_of(first, {0: 17}), batch_of(second, {0: 28})):
        store.write(TOPIC, stale)
        assert_same(store.load(["wf-1"])["wf-1"], second)
        assert store.checkpoints(TOPIC, [0]) == {0: 28}


def test_checkpoints_round_trip_per_topic_and_projection(store: SearchStore) -> None:
    assert store.checkpoints(TOPIC, [0, 1]) == {}
    store.write(TOPIC, Batch(checkpoints={0: 5, 3: 17}, duplicates={3: 2}))
    store.write("other-topic", Batch(checkpoints={0: 99}))
    store.write(TOPIC, Batch(checkpoints={0: 4, 3: 20}, duplicates={3: 1}))
    assert store.checkpoints(TOPIC, [0, 1, 2, 3]) == {0: 5, 3: 20}
    assert store.checkpoints("other-topic", [0, 3]) == {0: 99}
    doc = store.checkpoint_docs(TOPIC, [3])[3]
    assert (doc["duplicates_skipped"], doc["projection"]) == (3, "search")
    assert isinstance(doc["updated_at"], datetime)
    rebuild = store.fresh_generation()
    try:
        rebuild.write(TOPIC, Batch(checkpoints={0: 1}))
        assert rebuild.checkpoints(TOPIC, [0, 3]) == {0: 1}
        assert store.checkpoints(TOPIC, [0]) == {0: 5}
    finally:
        rebuild.drop()
        rebuild.close()


def test_full_text_finds_a_workflow_by_its_reason_and_a_task_by_its_name(
    store: SearchStore,
) -> None:
    failed, done = rows_after("media_transcode_exhausted", suffix="-x"), rows_after("media_480")
    store.write(TOPIC, batch_of(failed))
    store.write(TOPIC, batch_of(done))
    store.refresh()
    assert "encoder crash" in failed.workflow["reason"]
    hits = store.search_text("crash")
    assert {h["workflow_id"] for h in hits if h["kind"] == "workflow"} == {"wf-1-x"}
    [workflow_hit] = [h for h in hits if h["kind"] == "workflow"]
    assert {k: v for k, v in workflow_hit.items() if k not in ("kind", "score")} == failed.workflow
    tasks = [h for h in store.search_text("thumbnail") if h["kind"] == "task"]
    assert {(t["name"], t["workflow_id"]) for t in tasks} == {("media.thumbnail", "wf-1")}
    assert store.search_text("zebra") == []
    assert store.count_by_status() == {"FAILED": 1, "COMPLETED": 1}


def test_switching_to_a_fresh_generation_is_atomic_for_readers(store: SearchStore) -> None:
    store.write(TOPIC, batch_of(rows_after("media_480"), {0: 28}))  # COMPLETED in g1
    rebuilt = rows_after("media_transcode_exhausted")  # FAILED, in g2 only
    fresh = store.fresh_generation()
    reader, old = SearchStore(store.settings), SearchStore(store.settings, "g1")
    seen: list[str | None] = []
    failures: list[EsSchedError] = []
    first_read, switched = threading.Event(), threading.Event()

    def read_through_the_alias() -> None:
        try:
            while True:
                last = switched.is_set()  # a read begun after the switch must see g2
                row = reader.get_workflow("wf-1")
                seen.append(None if row is None else row["status"])
                first_read.set()
                if last:
                    return
        except EsSchedError as exc:  # handed to the test thread, which fails on it
            failures.append(exc)
            first_read.set()

    try:
        assert (fresh.generation, fresh.name) == ("g2", "search-rebuild-g2")
        fresh.write(TOPIC, batch_of(rebuilt, {0: 40}))
        assert_same(fresh.load(["wf-1"])["wf-1"], rebuilt)
        assert store.load(["wf-1"])["wf-1"].workflow["status"] == "COMPLETED"
        thread = threading.Thread(target=read_through_the_alias)
        thread.start()
        assert first_read.wait(30)
        store.switch_to("g2")
        switched.set()
        thread.join(30)
        assert not thread.is_alive() and failures == []
        changed = seen.index("FAILED")
        assert (
            changed > 0
            and set(seen[:changed]) == {"COMPLETED"}
            and set(seen[changed:]) == {"FAILED"}
        )
        assert_same(store.load(["wf-1"])["wf-1"], rebuilt)
        assert store.current_generation() == "g2"
        with pytest.raises(SearchError, match="index_not_found"):
            old.get_workflow("wf-1")  # the old generation is gone
    finally:
        old.close()
        reader.close()
        fresh.drop()
        fresh.close()


def test_a_row_the_mapping_refuses_raises_and_does_not_advance(store: SearchStore) -> None:
    rows = rows_after("media_480")
    bad = replace(batch_of(rows, {0: 28}), workflows={"wf-1": {**rows.workflow, "colour": 1}})
    with pytest.raises(SearchError, match="strict_dynamic_mapping_exception") as raised:
        store.write(TOPIC, bad)
    assert not isinstance(raised.value, StoreUnavailable)
    assert store.checkpoints(TOPIC, [0]) == {}


@pytest.mark.parametrize("flavor", ["opensearch", "elasticsearch"])
def test_nothing_listening_raises_store_unavailable(flavor: str) -> None:
    down = SearchStore(settings_for("http://127.0.0.1:9", flavor, "down"))
    try:
        calls: list[Callable[[], object]] = [
            down.ensure,
            lambda: down.load(["wf-1"]),
            lambda: down.checkpoints(TOPIC, [0]),
            lambda: down.write(TOPIC, Batch(checkpoints={0: 1})),
        ]
        for call in calls:
            with pytest.raises(StoreUnavailable, match=r"127\.0\.0\.1:9"):
                call()
    finally:
        down.close()
