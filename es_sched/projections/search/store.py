"""The search read model: workflow and task rows as documents in OpenSearch 2 or Elasticsearch 8.

Layout, for ``base = <ES_SCHED_SEARCH_INDEX_PREFIX>-<ES_SCHED_KAFKA_TOPIC_PREFIX>``:

- ``<base>-workflows`` and ``<base>-tasks`` are aliases, each pointing to one concrete index of
  the current generation (``<base>-workflows-g1``...). Readers and the live projector go
  through the aliases; a rebuild fills a fresh generation and ``switch_to`` swaps both aliases
  in one atomic ``_aliases`` request, then deletes the old generation.
- ``<base>-checkpoints`` holds one document per projection, topic and partition
  (id ``<projection>:<topic>:<partition>``): ``next_offset``, ``duplicates_skipped``,
  ``updated_at``. The live projection is ``search``; a rebuild's is
  ``search-rebuild-<generation>``, so both can run side by side.

A document's ``_source`` is the row exactly as ``views`` builds it (times as ISO 8601 strings,
turned back into aware datetimes on load) plus ``search_text``, which ``load`` strips. Mappings
are strict: a row field without a mapping is refused, not guessed. ``input``, ``output`` and
``resources`` are kept but not indexed; full text goes through ``search_text``.

Delivery: ``write`` sends every row in one bulk request with external versioning
(``version = row["version"]``), so a row only ever moves to a higher version; a 409 conflict
means an equal or newer row is already there, and counts as success. Bulk items are not atomic
together, but every item is idempotent, and the checkpoints are written (``next_offset`` only
grows) only after every row succeeded: a crash in between re-delivers the batch, which changes
nothing. Writes do not refresh; ``load`` refreshes the tasks index before it searches it, since
a search sees only refreshed documents and a missed task row would drop that task's events.

A rebuild must not switch before it has caught up: the live projector keeps its own
checkpoints, so switch once the rebuild's checkpoints reach the live ones, and keep the rebuild
projecting until they pass the live ones at the moment of the switch (re-delivery is harmless).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

import orjson

from es_sched.projections.search.client import (
    Doc,
    SearchClient,
    SearchError,
    client_for,
    unavailable_status,
)
from es_sched.projections.store import Batch, StoreUnavailable
from es_sched.projections.views import TASK_FIELDS, WORKFLOW_FIELDS, Row, Rows
from es_sched.settings import Settings

PROJECTION = "search"
FIRST_GENERATION = "g1"
PAGE_SIZE = 10_000  # the engines' default max_result_window: larger results page by search_after
CHUNK = 1_000  # ids per mget or terms query
SEARCH_TEXT_BYTES = 4096  # of the JSON dump of input and output

_KEYWORD = {"type": "keyword"}
_DATE = {"type": "date"}
_INTEGER = {"type": "integer"}
_OPAQUE = {"type": "object", "enabled": False}  # kept in _source, not indexed
_KEYWORDS = (
    "workflow_id",
    "task_id",
    "name",
    "tenant",
    "status",
    "ending",
    "correlation_id",
    "parent_workflow_id",
    "ref",
    "task_type",
    "worker_id",
)
_FIELD_TYPES: dict[str, Doc] = {
    **dict.fromkeys(_KEYWORDS, _KEYWORD),
    "reason": {"type": "keyword", "ignore_above": 1024},  # full text via search_text
    **dict.fromkeys(("created_at", "updated_at", "ended_at", "scheduled_at", "started_at"), _DATE),
    **dict.fromkeys(("def_version", "priority", "attempt", "iteration", "lease_epoch"), _INTEGER),
    "version": {"type": "long"},
    "progress": {"type": "float"},
    "retried": {"type": "boolean"},
    **dict.fromkeys(("input", "output", "resources"), _OPAQUE),
}
_DATES = frozenset(f for f in (*WORKFLOW_FIELDS, *TASK_FIELDS) if _FIELD_TYPES[f] is _DATE)
_TEXT_FIELDS = ("name", "workflow_id", "task_id", "ref", "status", "reason", "tenant")

# Words are runs of letters and digits: "media.transcode" and "transcode_720p" split too.
_ROW_SETTINGS: Doc = {
    "auto_expand_replicas": "0-1",
    "analysis": {
        "tokenizer": {"words": {"type": "pattern", "pattern": "[^\\p{L}\\p{N}]+"}},
        "analyzer": {"words": {"tokenizer": "words", "filter": ["lowercase", "asciifolding"]}},
    },
}
_CHECKPOINT_MAPPINGS: Doc = {
    "dynamic": "strict",
    "properties": {
        "projection": _KEYWORD,
        "topic": _KEYWORD,
        "partition": _INTEGER,
        "next_offset": {"type": "long"},
        "duplicates_skipped": {"type": "long"},
        "updated_at": _DATE,
    },
}
_ADVANCE = (
    "if (params.next_offset > ctx._source.next_offset) "
    "{ ctx._source.next_offset = params.next_offset; } "
    "ctx._source.duplicates_skipped += params.duplicates; "
    "ctx._source.updated_at = params.updated_at;"
)


def row_mappings(fields: tuple[str, ...]) -> Doc:
    """Strict mappings for rows with these fields, plus the full-text ``search_text``."""
    properties = {f: _FIELD_TYPES[f] for f in fields}  # a new field needs a type: KeyError
    return {
        "dynamic": "strict",
        "properties": {**properties, "search_text": {"type": "text", "analyzer": "words"}},
    }


def to_doc(row: Row) -> Doc:
    """The row as a document: times as ISO 8601, plus ``search_text``."""
    doc = {k: v.isoformat() if isinstance(v, datetime) else v for k, v in row.items()}
    words = " ".join(str(row[f]) for f in _TEXT_FIELDS if row.get(f))
    payload = orjson.dumps({"input": row.get("input"), "output": row.get("output")})
    doc["search_text"] = f"{words} {payload[:SEARCH_TEXT_BYTES].decode(errors='ignore')}"
    return doc


def from_doc(source: Doc) -> Row:
    """The row a document was made from (``to_doc`` undone), in place: every caller passes a
    parsed answer's own ``_source`` and keeps only the row. Copying each document without
    ``search_text`` was a large part of a verify's load from the search store."""
    source.pop("search_text", None)
    for key in _DATES & source.keys():
        if source[key] is not None:
            source[key] = datetime.fromisoformat(source[key])
    return source


@dataclass(frozen=True)
class Indices:
    workflows: str
    tasks: str

    def of(self, generation: str) -> Indices:
        return Indices(f"{self.workflows}-{generation}", f"{self.tasks}-{generation}")

    def pairs(self, other: Indices) -> list[tuple[str, str]]:
        return [(self.workflows, other.workflows), (self.tasks, other.tasks)]


def _chunks(items: list[str], size: int) -> Iterator[list[str]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _found(doc: Doc) -> bool:
    if "error" in doc:  # e.g. the index does not exist: ensure() was not run
        error = doc["error"]
        kind = str(error.get("type", "")) if isinstance(error, dict) else ""
        raise SearchError(f"get {doc.get('_index')}/{doc.get('_id')}: {error}", kind=kind)
    return bool(doc.get("found"))


def _raise_for_items(items: list[Doc], what: str, conflicts_ok: bool) -> None:
    failed = [
        item
        for item in items
        if "error" in item and not (conflicts_ok and item.get("status") == 409)
    ]
    if not failed:
        return
    reasons = "; ".join(
        f"{i.get('_id')}: {i['error'].get('type')}: {i['error'].get('reason')}"
        if isinstance(i["error"], dict)
        else f"{i.get('_id')}: {i['error']}"
        for i in failed[:3]
    )
    message = f"{what}: {len(failed)} of {len(items)} items failed ({reasons})"
    if any(unavailable_status(i.get("status")) for i in failed):
        raise StoreUnavailable(message)
    first = failed[0]["error"]
    kind = str(first.get("type", "")) if isinstance(first, dict) else ""
    raise SearchError(message, failed[0].get("status"), kind)


class SearchStore:
    """The ``Store`` port over a search engine (see the module docstring for the layout).

    ``generation=None`` is the live store: it reads and writes through the aliases.
    ``generation="g2"`` writes straight into that generation's indices, with its own
    checkpoints (projection ``search-rebuild-g2``). Nothing connects until the first call.
    """

    def __init__(self, settings: Settings, generation: str | None = None) -> None:
        self.settings = settings
        self.generation = generation
        self.name = PROJECTION if generation is None else f"{PROJECTION}-rebuild-{generation}"
        base = f"{settings.search.index_prefix}-{settings.kafka.topic_prefix}"
        self.aliases = Indices(f"{base}-workflows", f"{base}-tasks")
        self.checkpoints_index = f"{base}-checkpoints"
        self.target = self.aliases if generation is None else self.aliases.of(generation)
        self.page_size = PAGE_SIZE
        self._client: SearchClient = client_for(settings.search)

    # -- the Store port ----------------------------------------------------------------------
    def load(self, workflow_ids: list[str]) -> dict[str, Rows]:
        workflows: dict[str, Row] = {}
        for chunk in _chunks(list(dict.fromkeys(workflow_ids)), CHUNK):
            for doc in self._client.mget(self.target.workflows, chunk):
                if _found(doc):
                    workflows[doc["_id"]] = from_doc(doc["_source"])
        if not workflows:
            return {}  # new workflows (the common case) cost no refresh and no search
        self._client.refresh(self.target.tasks)  # see the module docstring
        tasks: dict[str, list[Row]] = {workflow_id: [] for workflow_id in workflows}
        for chunk in _chunks(list(workflows), CHUNK):
            for row in self._scan(self.target.tasks, {"terms": {"workflow_id": chunk}}):
                tasks[row["workflow_id"]].append(row)
        return {wid: Rows.load(row, tasks[wid]) for wid, row in workflows.items()}

    def checkpoints(self, topic: str, partitions: list[int]) -> dict[int, int]:
        docs = self.checkpoint_docs(topic, partitions)
        return {partition: int(doc["next_offset"]) for partition, doc in docs.items()}

    def write(self, topic: str, batch: Batch) -> None:
        """Rows (external versions; 409 is success), then checkpoints. Archive: PostgreSQL's."""
        rows: list[Doc] = []
        for index, key, row in [
            *((self.target.workflows, "workflow_id", r) for r in batch.workflows.values()),
            *((self.target.tasks, "task_id", r) for r in batch.tasks.values()),
        ]:
            action = {"_index": index, "_id": row[key], "version": int(row["version"])}
            rows += [{"index": {**action, "version_type": "external"}}, to_doc(row)]
        if rows:
            _raise_for_items(self._client.bulk(rows), f"{self.name} rows", conflicts_ok=True)
        marks = self._checkpoint_ops(topic, batch)
        if marks:
            _raise_for_items(self._client.bulk(marks), f"{self.name} checkpoints", False)

    def close(self) -> None:
        self._client.close()

    # -- set-up, maintenance and rebuilds -----------------------------------------------------
    def ensure(self) -> None:
        """Create what is missing: the checkpoints index, and the generation behind the aliases
        (``g1`` for a new live store) or this rebuild store's own generation."""
        self._client.create_index(
            self.checkpoints_index, {"auto_expand_replicas": "0-1"}, _CHECKPOINT_MAPPINGS
        )
        generation = self.generation or self.current_generation() or FIRST_GENERATION
        self._create_generation(generation)
        if self.generation is None:
            concrete = self.aliases.of(generation)
            missing = [
                {"add": {"index": index, "alias": alias}}
                for alias, index in self.aliases.pairs(concrete)
                if not self._client.get_alias(alias)
            ]
            if missing:
                self._client.update_aliases(missing)

    def current_generation(self) -> str | None:
        """The generation the workflows alias points to (None before ``ensure``)."""
        indices = self._client.get_alias(self.aliases.workflows)
        prefix = f"{self.aliases.workflows}-"
        return indices[0].removeprefix(prefix) if indices else None

    def fresh_generation(self) -> SearchStore:
        """Create the indices of a new generation (``g<n+1>``, or the next free number) and
        return a store that writes straight into them."""
        current = self.current_generation() or FIRST_GENERATION
        number = int(current[1:]) + 1 if re.fullmatch(r"g\d+", current) else 2
        while not self._create_generation(f"g{number}"):
            number += 1  # left over from an abandoned rebuild: leave it for its owner
        fresh = SearchStore(self.settings, f"g{number}")
        fresh.ensure()
        return fresh

    def switch_to(self, generation: str) -> None:
        """Point both aliases at ``generation`` in one atomic request, then delete the indices
        they pointed to before. Fails (changing nothing) if another switch got there first."""
        new = self.aliases.of(generation)
        old = {alias: self._client.get_alias(alias) for alias, _ in self.aliases.pairs(new)}
        actions: list[Doc] = []
        for alias, index in self.aliases.pairs(new):
            actions += [{"remove": {"index": i, "alias": alias}} for i in old[alias] if i != index]
            actions.append({"add": {"index": index, "alias": alias}})
        self._client.update_aliases(actions)
        for alias, index in self.aliases.pairs(new):
            for stale in old[alias]:
                if stale != index:
                    self._client.delete_index(stale)

    def drop(self) -> None:
        """Delete this store's indices: a rebuild store's generation; for the live store, the
        generation behind the aliases and the checkpoints index. For tests and teardown."""
        if self.generation is not None:
            for index in (self.target.workflows, self.target.tasks):
                self._client.delete_index(index)
            return
        for alias in (self.aliases.workflows, self.aliases.tasks):
            for index in self._client.get_alias(alias):
                self._client.delete_index(index)
        self._client.delete_index(self.checkpoints_index)

    def refresh(self) -> None:
        """Make every write so far visible to searches (writes never refresh by themselves)."""
        for index in (self.target.workflows, self.target.tasks, self.checkpoints_index):
            self._client.refresh(index)

    # -- queries for the CLI ------------------------------------------------------------------
    def search_text(self, text: str, limit: int = 20) -> list[Row]:
        """Workflows and tasks whose text has every word of ``text``, best first; each row
        carries ``kind`` ("workflow" | "task") and ``score``."""
        query = {"multi_match": {"query": text, "fields": ["search_text"], "operator": "and"}}
        answer = self._client.search(
            f"{self.target.workflows},{self.target.tasks}", {"query": query, "size": limit}
        )
        return [
            {
                **from_doc(hit["_source"]),
                "kind": "task" if "task_id" in hit["_source"] else "workflow",
                "score": hit["_score"],
            }
            for hit in answer["hits"]["hits"]
        ]

    def get_workflow(self, workflow_id: str) -> Row | None:
        """The workflow's row, read in real time (no refresh needed); its tasks: ``load``."""
        (doc,) = self._client.mget(self.target.workflows, [workflow_id])
        return from_doc(doc["_source"]) if _found(doc) else None

    def count_by_status(self, kind: Literal["workflow", "task"] = "workflow") -> dict[str, int]:
        index = self.target.workflows if kind == "workflow" else self.target.tasks
        body = {"size": 0, "aggs": {"status": {"terms": {"field": "status", "size": 100}}}}
        buckets = self._client.search(index, body)["aggregations"]["status"]["buckets"]
        return {str(b["key"]): int(b["doc_count"]) for b in buckets}

    def count(self, kind: Literal["workflow", "task"] = "workflow") -> int:
        index = self.target.workflows if kind == "workflow" else self.target.tasks
        return self._client.count(index, {"match_all": {}})

    def checkpoint_docs(self, topic: str, partitions: list[int]) -> dict[int, Row]:
        """The checkpoint documents of this projection (``next_offset``,
        ``duplicates_skipped``, ``updated_at``), by partition; absent ones are left out."""
        if not partitions:
            return {}
        ids = [self._checkpoint_id(topic, p) for p in partitions]
        return {
            int(doc["_source"]["partition"]): from_doc(doc["_source"])
            for doc in self._client.mget(self.checkpoints_index, ids)
            if _found(doc)
        }

    # -- helpers ------------------------------------------------------------------------------
    def _checkpoint_id(self, topic: str, partition: int) -> str:
        return f"{self.name}:{topic}:{partition}"

    def _checkpoint_ops(self, topic: str, batch: Batch) -> list[Doc]:
        now = datetime.now(UTC).isoformat()
        ops: list[Doc] = []
        for partition in sorted(batch.checkpoints.keys() | batch.duplicates.keys()):
            params: dict[str, Any] = {
                "next_offset": batch.checkpoints.get(partition, 0),
                "duplicates": batch.duplicates.get(partition, 0),
                "updated_at": now,
            }
            first = {
                "projection": self.name,
                "topic": topic,
                "partition": partition,
                "next_offset": params["next_offset"],
                "duplicates_skipped": params["duplicates"],
                "updated_at": now,
            }
            meta = {"_index": self.checkpoints_index, "_id": self._checkpoint_id(topic, partition)}
            ops += [
                {"update": {**meta, "retry_on_conflict": 3}},
                {
                    "script": {"source": _ADVANCE, "lang": "painless", "params": params},
                    "upsert": first,
                },
            ]
        return ops

    def _create_generation(self, generation: str) -> bool:
        """Create the generation's indices that are missing; True if the workflows index was
        created by this call (the generation is ours)."""
        concrete = self.aliases.of(generation)
        ours = self._client.create_index(
            concrete.workflows, _ROW_SETTINGS, row_mappings(WORKFLOW_FIELDS)
        )
        self._client.create_index(concrete.tasks, _ROW_SETTINGS, row_mappings(TASK_FIELDS))
        return ours

    def _scan(self, index: str, query: Doc) -> Iterator[Row]:
        """Every task row matching ``query``, by pages of ``page_size`` (search_after)."""
        body: Doc = {
            "query": query,
            "size": self.page_size,
            "sort": [{"task_id": "asc"}],
            "track_total_hits": False,
        }
        while True:
            hits = self._client.search(index, body)["hits"]["hits"]
            yield from (from_doc(hit["_source"]) for hit in hits)
            if len(hits) < self.page_size:
                return
            body = {**body, "search_after": hits[-1]["sort"]}
