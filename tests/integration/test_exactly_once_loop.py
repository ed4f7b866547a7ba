"""The exactly-once loop's failure paths on a real broker, through the decider.

Faults are injected through the role's Kafka clients (``tests.integration.faulty_role``); the
unit tests (tests/unit/test_transactional_loop.py) cover each classification with fakes. Every
test ends with the log's invariants: each submitted workflow completed, each workflow's seq is
1..n without gaps or duplicates, no event id twice.
"""

from __future__ import annotations

import pytest

from tests.integration.faulty_role import faulty
from tests.integration.runtime_harness import (
    MEDIA,
    Env,
    Worker,
    assert_log_invariants,
    final_status,
    read_events,
    roles,
)
from tests.support.wait import wait_until

pytestmark = pytest.mark.integration


def media_env() -> Env:
    env = Env()
    env.create()
    env.push_files(*MEDIA)
    return env


def start(env: Env, n: int) -> set[str]:
    inputs = [
        {"source_uri": f"file:///in/{i}.mp4", "asset_id": f"a{i}", "callback_url": "http://cb"}
        for i in range(n)
    ]
    return {s.workflow_id for s in env.submit("media_pipeline", inputs)}


def completed(env: Env, ids: set[str]) -> bool:
    by_wf = read_events(env)
    return all(final_status(by_wf.get(wf, [])) == "COMPLETED" for wf in ids)


def test_a_second_process_with_the_same_instance_fences_the_first_which_stops() -> None:
    env = media_env()
    same = {"ES_SCHED_RUN_INSTANCE": "same"}
    with Worker(env), roles(env, "decider", **same) as (first,):
        first.wait_log("restored partition 3", 60)
        with roles(env, "decider", **same) as (second,):
            # The second's init_transactions bumped the epoch of "<prefix>-decider-same", and
            # (static membership, ADR 21) its joining under the same group.instance.id fenced
            # the first's consumer: whichever the first notices first, it stops.
            second.wait_log("restored partition", 60)
            ids = start(env, 40)
            first.proc.wait(60)
            assert first.proc.returncode != 0
            log = first.log.read_text()
            assert f"transactional.id '{env.prefix}-decider-same' was fenced" in log
            assert "ES_SCHED_RUN_INSTANCE must be unique" in log
            # The fenced process committed nothing more; the second finishes everything.
            wait_until(lambda: completed(env, ids), 120, "the second decider to finish")
    assert_log_invariants(env, ids)


def test_an_aborted_and_an_ambiguous_transaction_are_recovered_without_duplicates() -> None:
    env = media_env()
    with Worker(env):
        victim = faulty(
            env, "decider",
            # abortable: abort, rewind to the committed offsets, decide the batch again
            "--fail", "send_offsets_to_transaction:3:abortable",
            # fatal after the commit went through: the outcome is unknown to the loop, which
            # re-creates the producer and rebuilds the decider's state from the changelog
            "--fail", "commit_transaction:8:fatal:after",
        )  # fmt: skip
        try:
            victim.wait_log("started", 60)
            ids = start(env, 150)
            victim.wait_log("fault: commit_transaction call 8 raises fatal", 120)
            wait_until(lambda: completed(env, ids), 180, "150 workflows despite the faults")
            log = victim.log.read_text()
        finally:
            victim.stop()
    assert "fault: send_offsets_to_transaction call 3 raises abortable" in log
    assert "transaction aborted" in log
    assert "re-creating the transactional producer" in log
    assert "rebuilding partitions" in log
    assert victim.proc.returncode == 0, log[-3000:]
    assert_log_invariants(env, ids)
