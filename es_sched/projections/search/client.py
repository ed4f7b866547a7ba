"""One port over both search engines: ``SearchClient``, with an OpenSearch 2 adapter
(opensearch-py) and an Elasticsearch 8 adapter (elasticsearch-py); ``client_for(settings)``
picks one by ``ES_SCHED_SEARCH_FLAVOR``.

The port holds only what ``SearchStore`` needs: indices with mappings, aliases (read, atomic
update), bulk, mget, search, count and refresh. Bodies and answers are plain JSON dicts in the
engines' common dialect, so the store never knows which library sits behind it.

Every driver exception is translated here, at the edge: a connection error, a timeout, a 429
or a 5xx answer raises ``StoreUnavailable`` (the projector backs off and retries); any other
refusal raises ``SearchError`` with the engine's status and reason. Constructing a client does
not connect; the first request does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Protocol, TypeVar, cast

import elastic_transport
import elasticsearch
import opensearchpy
import orjson

from es_sched.errors import InfrastructureError
from es_sched.projections.store import StoreUnavailable
from es_sched.settings import SearchSettings

Doc = dict[str, Any]
TIMEOUT_S = 30.0
_T = TypeVar("_T")


class SearchError(InfrastructureError):
    """The engine refused a request (a mapping, a query, an index name): retrying will not help."""

    def __init__(self, message: str, status: int | None = None, kind: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.kind = kind  # the engine's error type, e.g. "resource_already_exists_exception"


def unavailable_status(status: int | None) -> bool:
    """Whether an HTTP status (None: no answer at all) means "down or overloaded, retry"."""
    return status is None or status == 429 or status >= 500


class SearchClient(Protocol):
    url: str

    def create_index(self, name: str, settings: Doc, mappings: Doc) -> bool:
        """Create ``name``; False when it already exists."""
        ...

    def delete_index(self, name: str) -> None:
        """Delete ``name`` (an absent index is not an error)."""
        ...

    def refresh(self, index: str) -> None: ...

    def get_alias(self, alias: str) -> list[str]:
        """The indices ``alias`` points to (none when the alias does not exist)."""
        ...

    def update_aliases(self, actions: list[Doc]) -> None:
        """Apply ``add``/``remove`` actions in one atomic ``_aliases`` request."""
        ...

    def bulk(self, operations: list[Doc]) -> list[Doc]:
        """Send action and source lines; return each action's result (``status``, ``error``)."""
        ...

    def mget(self, index: str, ids: list[str]) -> list[Doc]:
        """Real-time get: one answer per id, in order (``found``, ``_source``, or ``error``)."""
        ...

    def search(self, index: str, body: Doc) -> Doc:
        """``body`` takes query, size, sort, search_after, aggs; returns the raw answer."""
        ...

    def count(self, index: str, query: Doc) -> int: ...

    def close(self) -> None: ...


class _Adapter:
    """What both adapters share: running a call and translating what it raises."""

    url: str
    _driver_errors: tuple[type[Exception], ...]

    def _status_and_kind(self, exc: Exception) -> tuple[int | None, str]:
        raise NotImplementedError

    @contextmanager
    def _translated(self, what: str) -> Iterator[None]:
        try:
            yield
        except self._driver_errors as exc:
            status, kind = self._status_and_kind(exc)
            reason = f"{what} at {self.url} failed: {exc}"
            if unavailable_status(status):
                raise StoreUnavailable(reason) from exc
            raise SearchError(reason, status, kind) from exc

    def _call(self, what: str, fn: Callable[[], _T]) -> _T:
        with self._translated(what):
            return fn()

    def _create(self, name: str, fn: Callable[[], object]) -> bool:
        try:
            self._call(f"creating index {name}", fn)
        except SearchError as exc:
            if exc.kind == "resource_already_exists_exception":
                return False
            raise
        return True

    def _absent_ok(self, what: str, fn: Callable[[], _T], absent: _T) -> _T:
        try:
            return self._call(what, fn)
        except SearchError as exc:
            if exc.status == 404:
                return absent
            raise


class _OrjsonSerializer(opensearchpy.JSONSerializer):
    """opensearch-py's JSON with orjson: its serializer is the standard library's ``json``,
    whose encoder and decoder stood out in a search projector's GIL profile (every bulk line;
    ADR 43). What orjson refuses (an integer
    past 64 bits, a lone surrogate, a non-string key) goes to the library's own serializer,
    which writes it or raises as before; both write the same values (datetimes as ISO 8601)."""

    def dumps(self, data: Any) -> Any:
        if isinstance(data, str):
            return data
        try:
            return orjson.dumps(data, default=self.default).decode()
        except TypeError:  # orjson.JSONEncodeError is a TypeError
            return super().dumps(data)

    def loads(self, s: str) -> Any:
        try:
            return orjson.loads(s)
        except orjson.JSONDecodeError:
            return super().loads(s)


class OpenSearchClient(_Adapter):
    """OpenSearch 2 through opensearch-py (bodies passed as ``body=``)."""

    _driver_errors = (opensearchpy.exceptions.OpenSearchException,)

    def __init__(self, url: str, **access: Any) -> None:
        self.url = url
        self._os = opensearchpy.OpenSearch(
            hosts=[url], timeout=TIMEOUT_S, serializer=_OrjsonSerializer(), **access
        )

    def _status_and_kind(self, exc: Exception) -> tuple[int | None, str]:
        if isinstance(exc, opensearchpy.exceptions.TransportError):
            status = exc.status_code
            return (status if isinstance(status, int) else None), str(exc.error)
        return None, type(exc).__name__  # serialization and other client-side failures

    def create_index(self, name: str, settings: Doc, mappings: Doc) -> bool:
        body = {"settings": settings, "mappings": mappings}
        return self._create(name, lambda: self._os.indices.create(index=name, body=body))

    def delete_index(self, name: str) -> None:
        self._absent_ok(f"deleting {name}", lambda: self._os.indices.delete(index=name), None)

    def refresh(self, index: str) -> None:
        self._call(f"refreshing {index}", lambda: self._os.indices.refresh(index=index))

    def get_alias(self, alias: str) -> list[str]:
        answer: Doc = self._absent_ok(
            f"reading alias {alias}", lambda: self._os.indices.get_alias(name=alias), {}
        )
        return sorted(answer)

    def update_aliases(self, actions: list[Doc]) -> None:
        body = {"actions": actions}
        self._call("updating aliases", lambda: self._os.indices.update_aliases(body=body))

    def bulk(self, operations: list[Doc]) -> list[Doc]:
        answer = self._call("bulk", lambda: self._os.bulk(body=operations))
        return [next(iter(item.values())) for item in answer["items"]]

    def mget(self, index: str, ids: list[str]) -> list[Doc]:
        answer = self._call(
            f"mget from {index}", lambda: self._os.mget(index=index, body={"ids": ids})
        )
        return cast(list[Doc], answer["docs"])

    def search(self, index: str, body: Doc) -> Doc:
        return cast(
            Doc, self._call(f"search in {index}", lambda: self._os.search(index=index, body=body))
        )

    def count(self, index: str, query: Doc) -> int:
        answer = self._call(
            f"count in {index}", lambda: self._os.count(index=index, body={"query": query})
        )
        return int(answer["count"])

    def close(self) -> None:
        self._os.close()


class ElasticsearchClient(_Adapter):
    """Elasticsearch 8 through elasticsearch-py (bodies passed as named fields)."""

    _driver_errors = (elasticsearch.ApiError, elastic_transport.TransportError)

    def __init__(self, url: str, **access: Any) -> None:
        self.url = url
        self._es = elasticsearch.Elasticsearch(url, request_timeout=TIMEOUT_S, **access)

    def _status_and_kind(self, exc: Exception) -> tuple[int | None, str]:
        if isinstance(exc, elasticsearch.ApiError):
            return exc.meta.status, str(exc.error)
        return None, type(exc).__name__  # no answer: refused, timed out, TLS

    def create_index(self, name: str, settings: Doc, mappings: Doc) -> bool:
        return self._create(
            name,
            lambda: self._es.indices.create(index=name, settings=settings, mappings=mappings),
        )

    def delete_index(self, name: str) -> None:
        self._absent_ok(f"deleting {name}", lambda: self._es.indices.delete(index=name), None)

    def refresh(self, index: str) -> None:
        self._call(f"refreshing {index}", lambda: self._es.indices.refresh(index=index))

    def get_alias(self, alias: str) -> list[str]:
        answer: Doc = self._absent_ok(
            f"reading alias {alias}", lambda: self._es.indices.get_alias(name=alias).body, {}
        )
        return sorted(answer)

    def update_aliases(self, actions: list[Doc]) -> None:
        self._call("updating aliases", lambda: self._es.indices.update_aliases(actions=actions))

    def bulk(self, operations: list[Doc]) -> list[Doc]:
        answer = self._call("bulk", lambda: self._es.bulk(operations=operations).body)
        return [next(iter(item.values())) for item in answer["items"]]

    def mget(self, index: str, ids: list[str]) -> list[Doc]:
        answer = self._call(f"mget from {index}", lambda: self._es.mget(index=index, ids=ids))
        return cast(list[Doc], answer.body["docs"])

    def search(self, index: str, body: Doc) -> Doc:
        answer = self._call(f"search in {index}", lambda: self._es.search(index=index, **body))
        return dict(answer.body)

    def count(self, index: str, query: Doc) -> int:
        answer = self._call(f"count in {index}", lambda: self._es.count(index=index, query=query))
        return int(answer.body["count"])

    def close(self) -> None:
        self._es.close()


def client_for(settings: SearchSettings) -> SearchClient:
    """The adapter for ``settings.flavor`` (nothing connects until the first request)."""
    if settings.flavor == "opensearch":
        return OpenSearchClient(settings.url, **access(settings))
    return ElasticsearchClient(settings.url, **access(settings))


def access(settings: SearchSettings) -> dict[str, Any]:
    """The credentials and CA of ``settings`` as the flavour's client takes them (ADR 72).
    opensearch-py has no api_key argument: an OpenSearch behind a proxy or a plugin that takes
    Elasticsearch-style keys gets the same ``Authorization: ApiKey`` header by hand."""
    out: dict[str, Any] = {}
    key, password = settings.api_key.get_secret_value(), settings.password.get_secret_value()
    os_flavor = settings.flavor == "opensearch"
    if settings.username:
        out["http_auth" if os_flavor else "basic_auth"] = (settings.username, password)
    elif key:
        if os_flavor:
            out["headers"] = {"Authorization": f"ApiKey {key}"}
        else:
            out["api_key"] = key
    if settings.ca_certs is not None:
        out["ca_certs"] = str(settings.ca_certs)
        if os_flavor:
            out["verify_certs"] = True
    return out
