"""The catalogue of the records beside events and commands (ready/timer/retry, dispatcher <->
worker wire, config, definitions): registered kinds equal the schema files, every example
decodes through its decoder and round-trips, a broken one is refused, and records as earlier
releases wrote them still decode."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest

from es_sched.domain.definitions import TaskLimits
from es_sched.domain.timers import Timer
from es_sched.errors import SchemaError
from es_sched.serialization import config, definitions, records, schema_dir, wire

ROOT = schema_dir()
EXAMPLES = ROOT / "examples"
FAMILIES: dict[str, set[str]] = {
    "records": set(records.VERSIONS),
    "wire": set(wire.VERSIONS),
    "config": {config.schema_name(kind) for kind in config.VERSIONS},
    "definitions": set(definitions.VERSIONS),
}
Doc = dict[str, Any]


def _example(rel: str) -> Doc:
    doc: Doc = json.loads((EXAMPLES / rel).read_text())
    return doc


def _raw(doc: Any) -> bytes:
    return orjson.dumps(doc)


def _decode_config(name: str) -> Callable[[bytes], config.ConfigChange]:
    kind = next(k for k in config.KINDS if config.schema_name(k) == name)
    subject = "type|1.0.0" if kind == "version-stop" else "subject"  # <task type>|<version>
    return lambda raw: config.parse(config.key_for(kind, subject), raw)


def _decode_definition(name: str) -> Callable[[bytes], definitions.DefinitionRecord]:
    def decode(raw: bytes) -> definitions.DefinitionRecord:
        try:  # the key the document claims, so that only the document can be wrong
            key = definitions.key_of(name, orjson.loads(raw))
        except (orjson.JSONDecodeError, KeyError):
            key = definitions.key_of(name, {"name": "x"})
        return definitions.decode_definition(key, raw)

    return decode


DECODERS: dict[str, Callable[[str], Callable[[bytes], Any]]] = {
    "records": lambda t: {
        "ready": records.decode_ready,
        "timer": records.decode_timer,
        "retry": records.decode_retry,
        "lease": records.decode_lease,
        "liveness": records.decode_liveness,
        "alert": records.decode_alert,
    }[t],
    "wire": lambda _: wire.decode,
    "config": _decode_config,
    "definitions": _decode_definition,
}
ALL = sorted(f"{family}/{t}.v1.json" for family, types in FAMILIES.items() for t in types)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_registered_kinds_are_the_schema_files(family: str) -> None:
    on_disk = {p.name.rsplit(".v", 1)[0] for p in (ROOT / family).glob("*.json")}
    assert on_disk == FAMILIES[family]
    examples = {p.name.rsplit(".v", 1)[0] for p in (EXAMPLES / family).glob("*.json")}
    assert examples == FAMILIES[family]


@pytest.mark.parametrize("rel", ALL)
def test_every_example_decodes(rel: str) -> None:
    family, name = rel.split("/")
    decode = DECODERS[family](name.split(".v")[0])
    assert decode(_raw(_example(rel))) is not None


@pytest.mark.parametrize("rel", ALL)
def test_a_broken_example_is_refused_with_the_reason(rel: str) -> None:
    family, name = rel.split("/")
    decode = DECODERS[family](name.split(".v")[0])
    doc = _example(rel)
    with pytest.raises(SchemaError):
        decode(b"{not json")
    if family == "definitions":  # Conductor documents carry fields es-sched does not know
        with pytest.raises(SchemaError, match="name"):
            decode(_raw({k: v for k, v in doc.items() if k != "name"}))
        return
    with pytest.raises(SchemaError, match="not_in_the_schema"):
        decode(_raw({**doc, "not_in_the_schema": 1}))
    for key in doc:  # every field is typed: a list of lists where it belongs never passes
        with pytest.raises(SchemaError, match=key):
            decode(_raw({**doc, key: [[]]}))


# -- round trips ----------------------------------------------------------------------------
def test_ready_record_round_trip_and_defaults() -> None:
    doc = _example("records/ready.v1.json")
    ready = records.decode_ready(_raw(doc))
    assert ready["workflow_started_at"] == datetime(2026, 11, 29, 8, 4, 58, 125000, tzinfo=UTC)
    fields: dict[str, object] = {**ready, "limits": records.ready_limits(ready)}
    assert fields["limits"] == TaskLimits(50, 60, 40)
    again = records.decode_ready(records.encode_ready(**fields))  # type: ignore[arg-type]
    assert again == ready
    minimal = records.decode_ready(b'{"workflow_id": "w", "task_id": "t", "name": "probe"}')
    assert minimal == {"workflow_id": "w", "task_id": "t", "name": "probe"}
    assert records.ready_limits(minimal) == TaskLimits()  # a record from before ADR 13


def test_timer_and_retry_round_trip() -> None:
    timer = records.decode_timer(_raw(_example("records/timer.v1.json")))
    assert timer == Timer(
        "7f0c2d1e-6b1a-5e8d-9c3f-2a4b6d8e0f12",
        "215970a1-cb55-5414-be94-3b55fef02bb3",
        "response_timeout",
        "task-7c3b5f08-720p",
        datetime(2026, 11, 29, 9, 5, 38, tzinfo=UTC),
    )
    assert records.decode_timer(records.encode_timer(timer)) == timer
    retry = records.decode_retry(_raw(_example("records/retry.v1.json")))
    assert (retry.next_attempt, retry.delay_seconds) == (2, 30.0)
    assert records.decode_retry(records.encode_retry(retry)) == retry


def test_a_dead_workers_alert_round_trips_with_an_id_shared_by_every_dispatcher() -> None:
    seen = datetime(2026, 11, 29, 8, 14, 2, tzinfo=UTC)
    raw = [
        records.worker_dead_alert("w7", "gpu", seen, seen + timedelta(seconds=s), by, ("t1",))
        for s, by in ((61, "dispatcher-a"), (62, "dispatcher-b"))
    ]
    a, b = (records.decode_alert(r) for r in raw)
    assert a["alert_id"] == b["alert_id"] == f"worker.dead:w7:{seen.isoformat()}"
    assert (a["kind"], a["subject"], a["pool"], a["reclaimed"]) == (
        "worker.dead",
        "w7",
        "gpu",
        ["t1"],
    )
    assert "declared dead, 1 lease(s) taken back" in a["summary"]
    assert a["declared_by"] != b["declared_by"]


def test_lease_record_round_trip() -> None:
    lease = records.decode_lease(_raw(_example("records/lease.v1.json")))
    assert lease.ready["task_id"] == lease.task_id and lease.last_epoch == 2
    held = lease.lease
    assert held is not None and (held.worker_id, held.gpu) == ("gpu-worker-3", 0)
    assert records.decode_lease(records.encode_lease(lease)) == lease
    queued = records.LeaseRecord(lease.task_id, lease.ready, lease.enqueued_at, 3, None)
    assert records.decode_lease(records.encode_lease(queued)) == queued
    with pytest.raises(SchemaError, match="name"):  # the ready record inside is checked too
        doc = _example("records/lease.v1.json")
        records.decode_lease(_raw({**doc, "ready": {"workflow_id": "w", "task_id": "t"}}))


@pytest.mark.parametrize("kind", sorted(wire.VERSIONS))
def test_wire_records_round_trip(kind: str) -> None:
    raw = _raw(_example(f"wire/{kind}.v1.json"))
    record = wire.decode(raw)
    assert record.kind == kind
    assert wire.decode(wire.encode(record)) == record
    assert orjson.loads(wire.encode(record)) == orjson.loads(raw)
    # the bytes the deep copy wrote before (issue 15), nested GpuStatus and key order included
    assert wire.encode(record) == orjson.dumps({"wire_version": 1, **dataclasses.asdict(record)})


def test_definition_records() -> None:
    workflow = _example("definitions/workflow.v1.json")
    key = definitions.key_of("workflow", workflow)
    record = definitions.decode_definition(key.encode(), definitions.encode_definition(workflow))
    assert (record.kind, record.name, record.doc) == ("workflow", workflow["name"], workflow)
    assert definitions.decode_definition(key, None).doc is None  # a tombstone
    with pytest.raises(SchemaError, match="say"):
        definitions.decode_definition("workflow:other:1", definitions.encode_definition(workflow))
    with pytest.raises(SchemaError, match="key"):
        definitions.decode_definition("flow:x", b"{}")
    with pytest.raises(SchemaError, match="name"):
        definitions.decode_definition("taskdef:x", b'{"retryCount": 1}')
    assert definitions.encode_definition({"name": "t", "cases": {1: "a"}}) == (
        b'{"cases":{"1":"a"},"name":"t"}'
    )


# -- records as earlier releases wrote them --------------------------------------------------
def test_records_written_before_the_schemas_still_decode() -> None:
    """The examples are byte-for-byte the documents of the previous encoders (``isoformat()``
    times with +00:00, no version field); records written by hand for tests lacked the
    optional ready fields. The new encoders write "Z" times; both read the same."""
    old_ready = b'{"name":"enc","priority":1,"task_id":"t1","workflow_id":"wf","attempt":2}'
    assert records.decode_ready(old_ready)["attempt"] == 2
    plus = _example("records/retry.v1.json")
    zulu = {**plus, "due_at": "2026-11-29T08:05:38Z"}
    assert records.decode_retry(_raw(plus)) == records.decode_retry(_raw(zulu))
    old_status = {**_example("wire/worker_status.v1.json"), "sent_at": "", "used": {}}
    assert isinstance(wire.decode(_raw(old_status)), wire.WorkerStatus)


@pytest.mark.parametrize(
    ("decode", "raw"),
    [
        (
            records.decode_ready,
            b'{"workflow_id": "w", "task_id": "t", "name": "n", '
            b'"workflow_started_at": "2026-13-01T00:00:00Z"}',
        ),
        (
            records.decode_timer,
            b'{"timer_id": "t", "workflow_id": "w", "kind": "wait", '
            b'"task_id": null, "due_at": "2026-12-01T12:00:05"}',
        ),
        (wire.decode, b'{"wire_version": 2, "kind": "cancel"}'),
        (wire.decode, b'{"wire_version": 1, "kind": "heartbeat"}'),
        (wire.decode, b'{"wire_version": 1, "kind": ["cancel"]}'),
        (wire.decode, b"[]"),
        (wire.decode, None),
    ],
)
def test_times_versions_and_kinds_are_checked(decode: Callable[[Any], Any], raw: Any) -> None:
    with pytest.raises(SchemaError):
        decode(raw)


def test_a_progress_record_with_a_bad_time_is_refused() -> None:
    doc = {**_example("wire/progress.v1.json"), "sent_at": "yesterday"}
    with pytest.raises(SchemaError, match="progress time"):
        wire.decode(_raw(doc))
