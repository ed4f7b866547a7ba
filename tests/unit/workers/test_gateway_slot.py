"""gateway.slot: each API process of one host and port gets its own gateway worker id, the
same one again after a restart (found: two uvicorn workers built gateways under one id, and
the tasks leased to the one without the assignments partition were stranded)."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

from es_sched.workers.gateway import slot


def _hold(folder: str, ready: multiprocessing.Event, done: multiprocessing.Event) -> None:  # type: ignore[valid-type]
    worker_id, _held = slot.claim("api-gateway-h-8080", Path(folder))
    assert worker_id == "api-gateway-h-8080"
    ready.set()  # type: ignore[attr-defined]
    done.wait(30)  # type: ignore[attr-defined]


def test_processes_on_one_port_get_distinct_ids_and_a_freed_slot_is_claimed_again(
    tmp_path: Path,
) -> None:
    ctx = multiprocessing.get_context("spawn")
    ready, done = ctx.Event(), ctx.Event()
    other = ctx.Process(target=_hold, args=(str(tmp_path), ready, done))
    other.start()
    try:
        assert ready.wait(30), "the other process did not claim slot 0"
        mine, held = slot.claim("api-gateway-h-8080", tmp_path)
        assert mine == "api-gateway-h-8080-1"  # slot 0 is the other process's
        held.close()
    finally:
        done.set()
        other.join(30)
    assert other.exitcode == 0
    again, held = slot.claim("api-gateway-h-8080", tmp_path)  # the process died: slot 0 is free
    assert again == "api-gateway-h-8080"
    held.close()
