"""The lag the native API reports, against the log itself (ADR 57): the API as a process on a
test's private topics, fed by the real decider and PostgreSQL projector, its ends kept by its
background reader. The test reads the events topic on its own (every record, so the end of the
last record is known without the code under test) and checks the answers against it:

- while workflows are being submitted, an answer whose ends were read after the test read the
  log never reports less than the log held then (``reflects + lag`` reaches the last record);
- with the projector stopped, the lag is exactly the records written past the checkpoint;
- once the writes settle, every partition reports lag 0, though each ends in a commit marker.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import httpx
import pytest
from confluent_kafka import TopicPartition

from es_sched.kafka.clients import consumer, read_partition, watermarks
from testkit.api import Api, api
from testkit.runtime import Env, Role, roles
from testkit.scale import pick
from testkit.settings import kafka_connection
from testkit.wait import wait_until

pytestmark = pytest.mark.integration
JSON = dict[str, Any]
FLOW = "fresh.flow"


@pytest.fixture(scope="module")
def env() -> Env:
    env = Env(partitions=2)
    env.create()
    step = f"{env.prefix}.step"
    flow = {
        "name": FLOW,
        "version": 1,
        "tasks": [{"name": step, "taskReferenceName": "step", "type": "SIMPLE"}],
    }
    env.push(flow, [{"name": step}])
    return env


@pytest.fixture(scope="module")
def server(env: Env) -> Iterator[Api]:
    # Checkpoints read afresh on each answer (no cached lower bound): the lag can be exact.
    knobs = {"ES_SCHED_API_ENDS_REFRESH_S": "0.1", "ES_SCHED_API_REFLECTS_CACHE_S": "0"}
    with roles(env, "decider"), api(env, **knobs) as server:
        yield server


@pytest.fixture(scope="module")
def projector(env: Env, server: Api) -> Iterator[Role]:
    """The PostgreSQL projector, having projected a first workflow (read back by its token)."""
    role = Role(env, "projector-pg")
    role.wait_log("started")
    done = server.http.post("/api/v1/workflows", json={"name": FLOW, "input": {}}).json()
    seen = server.http.get(
        f"/api/v1/workflows/{done['workflowId']}", params={"after": done["token"]}
    )
    assert seen.status_code == 200, seen.text
    yield role
    role.stop()


def record_ends(env: Env) -> dict[int, int]:
    """Per partition, the offset after the last record the log holds (markers left out)."""
    out = {}
    for p in range(env.partitions):
        offsets = [
            m.offset() or 0
            for m in read_partition(kafka_connection(env.bootstrap), env.topics.events, p)
        ]
        out[p] = max(offsets) + 1 if offsets else 0
    return out


def highs(env: Env) -> dict[int, int]:
    probe = consumer(kafka_connection(env.bootstrap), None)
    try:
        return {
            p: watermarks(probe, TopicPartition(env.topics.events, p))[1]
            for p in range(env.partitions)
        }
    finally:
        probe.close()


def freshness(server: Api) -> JSON:
    answer = server.http.get("/api/v1/queues")
    assert answer.status_code == 200, answer.text
    fresh: JSON = answer.json()["freshness"]
    return fresh


def read_after(server: Api, moment: float) -> JSON:
    """The first answer whose ends were read after ``moment`` (epoch seconds)."""
    found: list[JSON] = []

    def later() -> bool:
        fresh = freshness(server)
        found[:] = [fresh]
        return datetime.fromisoformat(fresh["endsReadAt"]).timestamp() > moment

    wait_until(later, 30, "an answer whose ends were read after the test read the log")
    return found[0]


def submitted(server: Api, count: int) -> list[str]:
    ids = []
    for _ in range(count):
        answer = server.http.post("/api/v1/workflows", json={"name": FLOW, "input": {}})
        assert answer.status_code == 201, answer.text  # decided and visible (ADR 56)
        ids.append(answer.json()["workflowId"])
    return ids


def test_the_lag_is_never_understated_while_writes_happen_and_zero_once_settled(
    env: Env, server: Api, projector: Role
) -> None:
    stop = threading.Event()
    errors: list[str] = []

    def load() -> None:
        with httpx.Client(base_url=server.url, timeout=60) as http:
            while not stop.is_set():
                answer = http.post("/api/v1/workflows", json={"name": FLOW, "input": {}})
                if answer.status_code != 201:
                    errors.append(answer.text)

    writer = threading.Thread(target=load, daemon=True)
    writer.start()
    seen_ends: list[dict[int, int]] = []
    try:
        distinct = pick(ci=4, full=20)  # checks at as many different ends of the log
        for _ in range(distinct * 50):
            ends = record_ends(env)
            fresh = read_after(server, time.time())  # the test read the log before this
            for p, end in ends.items():
                shown = fresh["reflects"][str(p)] + fresh["lag"][str(p)]
                assert shown >= end, (p, end, fresh)
            if ends not in seen_ends:
                seen_ends.append(ends)
            if len(seen_ends) > distinct:
                break
    finally:
        stop.set()
        writer.join(60)
    assert not errors, errors[:3]
    assert len(seen_ends) > distinct, f"the log grew while the lag was checked: {seen_ends}"

    # The last commands accepted are decided after the writer stops: settled is when the
    # read model reflects every record the log holds, both read again each time.
    settled: dict[int, int] = {}

    def caught_up() -> bool:
        settled.update(record_ends(env))
        return {int(p): o for p, o in freshness(server)["reflects"].items()} == settled

    wait_until(caught_up, 120, lambda: f"the projector at the last records {settled}")
    fresh = read_after(server, time.time())
    assert {int(p): n for p, n in fresh["lag"].items()} == {p: 0 for p in settled}
    assert fresh["lagging"] is False
    marked = highs(env)
    assert all(marked[p] > settled[p] for p in settled), (marked, settled)  # markers last


def test_the_lag_is_exact_while_the_projector_is_stopped(
    env: Env, server: Api, projector: Role
) -> None:
    submitted(server, 4)
    wait_until(lambda: not freshness(server)["lagging"], 120, "the projector caught up")
    projector.stop()
    reflected = {int(p): o for p, o in freshness(server)["reflects"].items()}
    # Through the command client: an API write would wait for the stopped projector (ADR 56).
    with env.client() as client:
        client.submit_many(FLOW, [{} for _ in range(6)])
    wait_until(lambda: record_ends(env) != reflected, 60, "the decider wrote the events")
    ends = record_ends(env)
    fresh = read_after(server, time.time())
    assert {int(p): o for p, o in fresh["reflects"].items()} == reflected
    assert {int(p): n for p, n in fresh["lag"].items()} == {p: ends[p] - reflected[p] for p in ends}
    assert fresh["lagging"] is True
