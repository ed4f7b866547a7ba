"""The OpenSearch adapter's orjson serializer writes and reads what opensearch-py's own does,
and hands it what orjson refuses."""

from __future__ import annotations

import decimal
import math
import uuid
from datetime import UTC, datetime
from typing import Any

import opensearchpy
import pytest

from es_sched.projections.search.client import OpenSearchClient, _OrjsonSerializer

LIBRARY = opensearchpy.JSONSerializer()
FAST = _OrjsonSerializer()


@pytest.mark.parametrize(
    "data",
    [
        pytest.param({"a": 1, "b": [1.5, 1e16, -0.0, None, True]}, id="numbers"),
        pytest.param({"t": datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=UTC)}, id="aware-time"),
        pytest.param({"t": datetime(2026, 1, 2)}, id="naive-time"),
        pytest.param({"s": 'é \u2028 "quoted" \\ \n'}, id="text"),
        pytest.param({"d": decimal.Decimal("1.5"), "u": uuid.UUID(int=5)}, id="library-defaults"),
        pytest.param({1: 2}, id="int-key-fallback"),
        pytest.param({"big": 2**70}, id="big-int-fallback"),
        pytest.param({"index": {"_index": "wf", "_id": "x", "version": 3}}, id="bulk-action"),
        pytest.param("already a string", id="string"),
    ],
)
def test_writes_what_the_library_writes(data: Any) -> None:
    assert FAST.dumps(data) == LIBRARY.dumps(data)


def test_a_lone_surrogate_goes_to_the_library() -> None:
    assert FAST.dumps({"s": "\ud800"}) == LIBRARY.dumps({"s": "\ud800"})


def test_what_it_cannot_write_is_the_librarys_error() -> None:
    with pytest.raises(opensearchpy.exceptions.SerializationError):
        FAST.dumps({"x": object()})


@pytest.mark.parametrize(
    "text", ['{"a":[1,2.5,null,"\\u00e9"]}', '{"took":3,"items":[{"index":{"status":201}}]}']
)
def test_reads_what_the_library_reads(text: str) -> None:
    assert FAST.loads(text) == LIBRARY.loads(text)


def test_what_orjson_refuses_to_read_goes_to_the_library() -> None:
    assert math.isnan(FAST.loads("NaN"))
    with pytest.raises(opensearchpy.exceptions.SerializationError):
        FAST.loads("{")


def test_the_adapter_uses_it() -> None:
    client = OpenSearchClient("http://127.0.0.1:1")
    assert isinstance(client._os.transport.serializer, _OrjsonSerializer)
