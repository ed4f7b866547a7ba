"""The projector writes a batch on its writer thread while it folds the next one (ADR 32), and
keeps the store's obligations: batches reach the store in order, one at a time; Kafka offsets
are committed only after their batch is in the store; a workflow whose rows are being written
is loaded only after that write (else the load would hand back rows older than the ones in
flight); a write the store refused as unavailable is retried until it lands. A workflow that
starts in the batch is not looked up in the store (it cannot be there): no "load" for it."""

from __future__ import annotations

import threading
from typing import Any

from confluent_kafka import TopicPartition

from es_sched.projections.projector import Projector
from es_sched.projections.store import Batch, StoreUnavailable
from es_sched.projections.views import Rows
from es_sched.serialization import encode_event
from testkit.golden import history
from testkit.settings import private_settings


class GatedStore:
    """Writes wait for ``gate``; records what happened, in order."""

    name = "pg"

    def __init__(self, unavailable: int = 0) -> None:
        self.gate = threading.Event()
        self.log: list[str] = []
        self.writing = False
        self.unavailable = unavailable
        self.rows: dict[str, Rows] = {}

    def load(self, workflow_ids: list[str]) -> dict[str, Rows]:
        assert not self.writing, "a load ran while a write of its workflow was in flight"
        self.log.append(f"load {','.join(workflow_ids)}")
        return {wf: self.rows[wf] for wf in workflow_ids if wf in self.rows}

    def write(self, topic: str, batch: Batch) -> None:
        self.writing = True
        try:
            self.gate.wait(10)
            if self.unavailable:
                self.unavailable -= 1
                raise StoreUnavailable("down")
            self.log.append(f"write {sorted(batch.checkpoints.items())}")
            for wf, row in batch.workflows.items():
                self.rows[wf] = Rows(row)
        finally:
            self.writing = False


class Message:
    def __init__(self, value: bytes, offset: int) -> None:
        self._value, self._offset = value, offset

    def error(self) -> None:
        return None

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return self._offset

    def value(self) -> bytes:
        return self._value

    def key(self) -> bytes:
        return b"wf-1"


class Consumer:
    def __init__(self, log: list[str]) -> None:
        self.log = log

    def commit(self, offsets: list[TopicPartition], asynchronous: bool = True) -> None:
        self.log.append(f"commit {[(tp.partition, tp.offset) for tp in offsets]}")

    def assignment(self) -> list[TopicPartition]:
        return []

    def pause(self, partitions: Any) -> None: ...

    def resume(self, partitions: Any) -> None: ...

    def poll(self, timeout: float) -> None: ...


def _projector(store: GatedStore) -> Projector:
    p = Projector(private_settings(), store)  # type: ignore[arg-type]
    p.consumer = Consumer(store.log)  # type: ignore[assignment]
    p._export = lambda lag: None  # type: ignore[method-assign]
    p.lag.update = lambda *a, **k: None  # type: ignore[method-assign,assignment]
    return p


def _messages() -> list[Message]:
    return [Message(encode_event(ev), n) for n, ev in enumerate(history("media_1080_v1"))]


def test_an_evicted_workflow_in_flight_is_loaded_after_its_write() -> None:
    store = GatedStore()
    p, msgs = _projector(store), _messages()
    p.project(msgs[:5])  # type: ignore[arg-type]  # its write waits at the gate
    p.cache.clear()  # evicted while in flight
    threading.Timer(0.3, store.gate.set).start()
    p.project(msgs[5:10])  # type: ignore[arg-type]  # must wait for the first write before loading wf-1
    p.flush()
    assert store.log == [
        "write [(0, 5)]",
        "commit [(0, 5)]",
        "load wf-1",
        "write [(0, 10)]",
        "commit [(0, 10)]",
    ]
    assert store.rows["wf-1"].workflow["version"] == 10


def test_an_unavailable_store_is_retried_and_offsets_wait_for_it() -> None:
    store = GatedStore(unavailable=2)
    store.gate.set()
    p, msgs = _projector(store), _messages()
    p.project(msgs[:5])  # type: ignore[arg-type]
    p.project(msgs[5:])  # type: ignore[arg-type]
    p.flush()
    assert store.log == [
        "write [(0, 5)]",
        "commit [(0, 5)]",
        f"write [(0, {len(msgs)})]",
        f"commit [(0, {len(msgs)})]",
    ]
    assert p.next_offset == {0: len(msgs)}
