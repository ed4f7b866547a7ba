"""Search contract: OpenSearch 2 (opensearch-py) or Elasticsearch 8 (elasticsearch client).

The search projection indexes whole documents with external versioning: a newer version
replaces the document, an older one is refused with a 409 conflict (which the projector counts
as success), and a refreshed index finds the document by full text. Each test has its own index.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from elasticsearch import ConflictError as EsConflict
from elasticsearch import Elasticsearch
from opensearchpy import OpenSearch
from opensearchpy.exceptions import ConflictError as OsConflict

from tests.integration.backends import Backend


class SearchClient:
    """The few calls the contract needs, over either client library."""

    def __init__(self, backend: Backend) -> None:
        self.flavor = backend.search_flavor
        self.client: Any
        if self.flavor == "opensearch":
            self.client = OpenSearch(hosts=[backend.search_url], timeout=30)
        else:
            self.client = Elasticsearch(backend.search_url, request_timeout=30)

    def create_index(self, name: str) -> None:
        settings = {"number_of_shards": 1, "number_of_replicas": 0}
        mappings = {"properties": {"status": {"type": "keyword"}, "title": {"type": "text"}}}
        if self.flavor == "opensearch":
            self.client.indices.create(
                index=name, body={"settings": settings, "mappings": mappings}
            )
        else:
            self.client.indices.create(index=name, settings=settings, mappings=mappings)

    def index(self, name: str, doc_id: str, doc: dict[str, Any], version: int) -> int:
        """Index with an external version; return the HTTP status (201/200, or 409)."""
        if self.flavor == "opensearch":
            try:
                self.client.index(
                    index=name, id=doc_id, body=doc, version=version, version_type="external"
                )
            except OsConflict:
                return 409
            return 200
        try:
            self.client.index(
                index=name, id=doc_id, document=doc, version=version, version_type="external"
            )
        except EsConflict:
            return 409
        return 200

    def refresh(self, name: str) -> None:
        self.client.indices.refresh(index=name)

    def search(self, name: str, text: str) -> list[dict[str, Any]]:
        query = {"match": {"title": text}}
        if self.flavor == "opensearch":
            resp = self.client.search(index=name, body={"query": query})
        else:
            resp = self.client.search(index=name, query=query)
        return [hit for hit in resp["hits"]["hits"]]

    def get(self, name: str, doc_id: str) -> dict[str, Any]:
        return dict(self.client.get(index=name, id=doc_id))

    def delete_index(self, name: str) -> None:
        self.client.indices.delete(index=name)


@pytest.fixture
def index(backend: Backend, unique: str) -> Iterator[tuple[SearchClient, str]]:
    client = SearchClient(backend)
    name = f"contract-{unique}"
    client.create_index(name)
    try:
        yield client, name
    finally:
        client.delete_index(name)


def test_index_refresh_and_full_text_search(index: tuple[SearchClient, str]) -> None:
    client, name = index
    client.index(name, "wf-1", {"status": "RUNNING", "title": "transcode 1080p ladder"}, 1)
    client.index(name, "wf-2", {"status": "FAILED", "title": "probe broken upload"}, 1)
    client.refresh(name)
    hits = client.search(name, "ladder")
    assert [h["_id"] for h in hits] == ["wf-1"]


def test_external_version_refuses_older_documents(index: tuple[SearchClient, str]) -> None:
    client, name = index
    statuses = [
        client.index(name, "wf-1", {"status": "RUNNING", "title": "a"}, 3),
        client.index(name, "wf-1", {"status": "COMPLETED", "title": "a"}, 7),
        client.index(name, "wf-1", {"status": "RUNNING", "title": "a"}, 5),
    ]
    assert statuses == [200, 200, 409]
    doc = client.get(name, "wf-1")
    assert (doc["_version"], doc["_source"]["status"]) == (7, "COMPLETED")
