"""The Kafka broker fails under load, and nothing but the broker is touched: kill -9 then a
restart on the same data, or SIGSTOP for 30 s then SIGCONT.

A private single-node Kafka (own ports 19120/19121 and state folder, see private_kafka.py)
runs ``es-sched run`` with the decider, timers, retry relay and dispatcher in one process, both
projectors (``projector-pg``, ``projector-search``, on the shared PostgreSQL and OpenSearch) in
another, and one ``es-sched worker --noop``. 1,200 media workflows are submitted; the fault
fires once 200 tasks have completed, with over 1,000 workflows in flight (counted on the events
topic just before it). Before the transactional loop was bounded the decider blocked for good
inside ``send_offsets_to_transaction`` and the dispatcher exited on a failed commit; before ADR
40 a fresh-clone CI run saw the dispatcher's ready partitions, assigned again after the
SIGSTOP, never fetched (librdkafka#5586).

What proves the fault fired:
- kill -9: the broker's pid is gone (no such process, or a zombie not reaped yet), and the
  roles' log shows librdkafka's "Connection refused" from that port.
- SIGSTOP: ``/proc/<pid>/stat`` shows state ``T`` (stopped) for 30 s, and a probe producer
  connected before the stop has a record sent at its start fail with ``_MSG_TIMED_OUT`` (its
  ``message.timeout.ms`` is 10 s): a client's request went unanswered. The roles' own logged
  timeouts are reported in the fault's row but not required: whether a role's request times
  out inside 30 s depends on what it had in flight at that instant (CI saw a run where a
  30 s request timer and the SIGCONT raced and nothing was logged).

Recovery is measured, never asserted: from the broker answering again to the first record each
role wrote after that moment (record timestamps: a record produced during the outage and sent
later keeps its older timestamp, so it does not count) and, for the projectors, to the first
checkpoint that moved. The end is checked on the log (I1-I3, I5: ``assert_log_invariants``) and
on both read models against it (I4: ``es-sched audit check --idle``). The same processes ran
throughout and stop cleanly on SIGTERM.
"""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer

from es_sched import bootstrap
from es_sched.kafka.clients import check_delivery, producer
from es_sched.kafka.topics import assignment_topic, ensure_topic
from es_sched.projections.replay import projected
from es_sched.serialization import decode_input
from testkit.fault_report import Row, record
from testkit.kafka import read_to_end
from testkit.private_kafka import PrivateKafka, private_kafka, process_state
from testkit.runtime import (
    MEDIA,
    Env,
    Role,
    assert_log_invariants,
    describe_stall,
    final_status,
    media_inputs,
    read_events,
    read_models_caught_up,
)
from testkit.wait import wait_until
from tests.integration.projection_harness import dropped_schemas

pytestmark = pytest.mark.integration
PORT, CONTROLLER_PORT = 19120, 19121
WORKFLOWS, FIRE_AFTER_TASKS, STOPPED_S = 1200, 200, 30.0
PROBE_TIMEOUT_MS = 10_000  # well inside the stop
TYPES = "media.probe,media.transcode,media.thumbnail,media.package,media.write_asset,media.callback"
ROLES = ["run", *(a for r in ("decider", "timers", "retry", "dispatcher") for a in ("--role", r))]
PROJECTORS = ["run", "--role", "projector-pg", "--role", "projector-search"]
WORKER = ["worker", "--noop", "--types", TYPES, "--concurrency", "16", "--heartbeat-s", "1"]
TIMEOUTS = (  # what the roles log when their requests to a frozen broker time out
    "did not return within",  # the transactional loop gave a producer call up
    "records not delivered yet",  # the dispatcher waits for its deliveries
    "Timed out",  # a consumer or the worker's end-of-partition query
)


@pytest.fixture
def kafka(tmp_path: Path) -> Iterator[PrivateKafka]:
    yield from private_kafka(tmp_path / "state", PORT, CONTROLLER_PORT)


def histories(env: Env) -> dict[str, str]:
    return {wf: final_status(v) for wf, v in read_events(env).items()}


def tasks_completed(env: Env) -> int:
    return sum(e.type == "task.completed" for v in read_events(env).values() for e in v)


def checkpoints(env: Env) -> dict[str, int]:
    """Events projected so far by each read model (the sum of its checkpoints)."""
    out = {}
    for target in ("pg", "search"):
        store = bootstrap.store(env.settings, target)
        try:
            out[target] = sum((projected(store, env.topics.events, list(range(4))) or {}).values())
        finally:
            store.close()
    return out


def first_after(env: Env, topic: str, since: float, keep: Callable[[Any], bool]) -> float | None:
    """Seconds from ``since`` (wall clock) to the first record of ``topic`` stamped after it."""
    stamps = [
        m.timestamp()[1] / 1000
        for m in read_to_end(topic, "read_committed", bootstrap=env.bootstrap)
        if keep(m)
    ]
    later = [t for t in stamps if t >= since]
    return min(later) - since if later else None


def reports(msg: Any) -> bool:
    """A worker's report on task-results (the dispatcher writes DispatchTask/ExpireLease)."""
    return type(decode_input(msg.value())).__name__.startswith("Report")


def probe_producer(bootstrap: str, topic: str) -> Producer:
    """A producer connected to the broker with a delivered record, whose next record gives up
    after ``PROBE_TIMEOUT_MS`` (the default would wait out the stop)."""
    ensure_topic(bootstrap, topic, 1)
    limits = {"message.timeout.ms": PROBE_TIMEOUT_MS, "request.timeout.ms": PROBE_TIMEOUT_MS}
    probe = producer(bootstrap, None, **limits)
    probe.produce(topic, b"before the stop", on_delivery=check_delivery)
    assert probe.flush(30) == 0, "the probe's first record was not delivered"
    return probe


def probe_times_out(probe: Producer, topic: str) -> str:
    """Send one record to the stopped broker; the delivery error's name (``_MSG_TIMED_OUT``)."""
    errors: list[KafkaError | None] = []
    probe.produce(topic, b"during the stop", on_delivery=lambda err, msg: errors.append(err))
    wait_until(
        lambda: probe.poll(0.5) >= 0 and bool(errors),
        PROBE_TIMEOUT_MS / 1000 + 15,
        "the probe's delivery report",
    )
    assert errors[0] is not None, "a record was delivered to a stopped broker"
    assert errors[0].code() == KafkaError._MSG_TIMED_OUT, f"probe failed otherwise: {errors[0]}"
    return str(errors[0].name())


def timeouts(procs: tuple[Role, ...]) -> dict[str, int]:
    """How many times the roles logged each of ``TIMEOUTS`` so far."""
    texts = [r.text() for r in procs]
    return {t: sum(text.count(t) for text in texts) for t in TIMEOUTS}


def run_fault(kafka: PrivateKafka, fault: str) -> None:
    """Load, fire ``fault`` ("kill" or "stop"), recover, check; records the fault's row."""
    # Leases of 4 x 10 s outlast the outage, so no task is taken back from the live worker.
    env = Env(bootstrap=kafka.bootstrap, extra={"ES_SCHED_DISPATCH_HEARTBEAT_S": "10"})
    env.create()
    env.push_files(*MEDIA)
    with dropped_schemas(env):
        roles, worker = Role(env, "roles", ROLES), Role(env, "worker", WORKER)
        projectors = Role(env, "projectors", PROJECTORS)
        procs = (worker, projectors, roles)
        try:
            roles.wait_log("dispatcher started", 90)
            projectors.wait_log("projector pg started", 90)
            projectors.wait_log("projector search started", 90)
            worker.wait_log("started", 90)
            submitted = {
                s.workflow_id for s in env.submit("media_pipeline", media_inputs(WORKFLOWS))
            }
            wait_until(
                lambda: tasks_completed(env) >= FIRE_AFTER_TASKS,
                300,
                f"{FIRE_AFTER_TASKS} tasks to complete",
            )
            in_flight = sum(s == "RUNNING" for s in histories(env).values())
            assert in_flight >= 1000, f"only {in_flight} workflows in flight at the fault"
            pid = kafka.pid
            assert pid is not None
            if fault == "kill":
                kafka.kill()  # kill -9; returns once the process is gone
                # Z: a zombie not reaped yet
                gone = not Path(f"/proc/{pid}").exists() or process_state(pid) == "Z"
                assert gone, f"broker pid {pid} is still running: {process_state(pid)}"
                roles.wait_log(f"127.0.0.1:{PORT} failed: Connection refused", 60)
                proof = f"broker pid {pid} gone after SIGKILL; roles logged Connection refused"
                kafka.start()  # same data folder: log recovery, then the same topics and groups
            else:
                probe_topic = f"{env.prefix}.stop-probe"
                probe = probe_producer(kafka.bootstrap, probe_topic)
                os.kill(pid, signal.SIGSTOP)
                stopped_at = time.monotonic()
                # kill() returns before every thread of the JVM is stopped: wait for the state
                # (CI read it once at once, and failed on a broker still stopping).
                wait_until(
                    lambda: process_state(pid) == "T",
                    10,
                    lambda: f"broker pid {pid} to stop: {process_state(pid)}",
                )
                logged = timeouts(procs)
                probe_error = probe_times_out(probe, probe_topic)
                # Held for STOPPED_S (the fault's length, not a wait for something to happen);
                # the roles' logged timeouts are gathered meanwhile.
                while time.monotonic() - stopped_at < STOPPED_S:
                    assert process_state(pid) == "T"
                    time.sleep(1.0)
                os.kill(pid, signal.SIGCONT)
                wait_until(lambda: process_state(pid) != "T", 10, "the broker to run again")
                stopped_s = time.monotonic() - stopped_at
            ready = time.time()
            before = checkpoints(env)
            moved: dict[str, float] = {}

            def projectors_moved() -> bool:
                now = checkpoints(env)
                for target, n in now.items():
                    if n > before[target] and target not in moved:
                        moved[target] = time.time() - ready
                return len(moved) == len(now)

            def stalled(what: str) -> Callable[[], str]:
                return lambda: f"{what}; now: " + describe_stall(env, WORKFLOWS, *procs)

            wait_until(projectors_moved, 300, stalled("both projectors to write again"))
            if fault == "stop":
                # Reported, not required (see the module's docstring); gathered up to the
                # recovery, as a request sent just before the stop times out on its own timer.
                timed_out = sorted(t for t, n in timeouts(procs).items() if n > logged[t])
                proof = (
                    f"broker state T for {stopped_s:.0f}s; a probe's record failed with "
                    f"{probe_error}; roles logged {timed_out or 'no timeout'}"
                )
            wait_until(
                lambda: sum(s == "COMPLETED" for s in histories(env).values()) == WORKFLOWS,
                600,
                stalled("every workflow after the fault"),
            )
            wait_until(
                lambda: read_models_caught_up(env), 300, stalled("both read models caught up")
            )
            assert all(r.proc.poll() is None for r in procs), "nothing else restarted"
        finally:
            for r in procs:
                r.stop()
        for r in procs:
            log = r.text()
            assert r.proc.returncode == 0, f"SIGTERM stops {r.log.name} cleanly:\n{log[-3000:]}"
            assert not re.search(r"role \S+ failed", log), log[-3000:]
        assert_log_invariants(env, submitted, read_models=True)  # I4: audit check --idle
    assignments = assignment_topic(env.prefix, "default")
    firsts = {
        "decider": first_after(env, env.topics.events, ready, lambda m: True),
        "dispatcher": first_after(env, assignments, ready, lambda m: True),
        "worker": first_after(env, env.topics.task_results, ready, reports),
    }
    recovery = "; ".join(
        [f"{role} {s:.1f}s" for role, s in firsts.items() if s is not None]
        + [f"projector-{t} {s:.1f}s" for t, s in sorted(moved.items())]
    )
    # Reported, not required: whether a projector's fetcher stalled after the outage and the
    # watch (ADR 46, es_sched/kafka/stall.py) assigned its partitions again.
    stalls = projectors.text().count("again at their positions")
    recovery += f"; stalled fetchers assigned again (ADR 46): {stalls}"
    print(f"\n[broker {fault}] in flight {in_flight}; first record after ready: {recovery}")
    record(
        Row(
            fault="kill -9 of the Kafka broker, restart on the same data"
            if fault == "kill"
            else f"SIGSTOP of the Kafka broker for {STOPPED_S:.0f}s, then SIGCONT",
            in_flight=in_flight,
            proof=proof,
            invariants=f"I1-I5 clean ({WORKFLOWS} workflows; I4 on pg and search)",
            recovery=f"broker ready -> first new record per role: {recovery}",
        )
    )


@pytest.mark.timeout(1200)  # 1,200 workflows of 6 tasks on a loaded 2-core machine
def test_kill_9_of_the_broker_under_load_then_restart_every_workflow_completes(
    kafka: PrivateKafka,
) -> None:
    run_fault(kafka, "kill")


@pytest.mark.timeout(1200)
def test_sigstop_of_the_broker_for_30s_under_load_every_workflow_completes(
    kafka: PrivateKafka,
) -> None:
    run_fault(kafka, "stop")
