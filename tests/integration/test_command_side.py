"""The command side against the real Kafka of ``es-sched stack up``, one topic prefix per test.

What reaches the ``commands`` topic is read back: a valid StartWorkflow arrives once, keyed by
its workflow id and carrying its definition; an invalid or oversized one never arrives (checked
with a ``read_uncommitted`` reader from the beginning, which would see even aborted records).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import pytest
from confluent_kafka.admin import AdminClient

from es_sched.commands import CommandClient, UnknownDefinition
from es_sched.domain.commands import CancelWorkflow, SignalWorkflow, StartWorkflow
from es_sched.domain.definitions import DefinitionError
from es_sched.domain.events import Event, WorkflowCompleted, WorkflowEnded, WorkflowPaused
from es_sched.domain.ids import event_id, workflow_id_for_command
from es_sched.errors import SchemaError
from es_sched.kafka import clients
from es_sched.kafka.connection import connection
from es_sched.serialization import decode_input, encode_event
from es_sched.settings import Settings
from testkit import ROOT
from testkit.cli import es_sched
from testkit.kafka import read_to_end, require_kafka
from testkit.runtime import MEDIA
from testkit.settings import private_settings, vars_of
from testkit.wait import wait_until

pytestmark = pytest.mark.integration

MEDIA_INPUT = {"source_uri": "s3://in/match.mp4", "asset_id": "a1", "callback_url": "http://cb"}
Record = tuple[str | None, bytes]


@pytest.fixture
def settings(unique: str) -> Settings:
    """A private topic prefix (its topics are deleted after the test by ``delete_new_topics``)."""
    require_kafka()
    return private_settings(unique, partitions=3, assignment_partitions=3)


@pytest.fixture
def client(settings: Settings) -> Iterator[CommandClient]:
    with CommandClient(settings) as c:
        yield c


@pytest.fixture
def pushed(client: CommandClient) -> CommandClient:
    client.push_definitions(MEDIA)
    return client


def read_all(settings: Settings, topic: str, isolation: str = "read_committed") -> list[Record]:
    """(key, value) of every record of ``topic``, from the beginning to its end."""
    return [
        (key.decode() if isinstance(key := msg.key(), bytes) else key, msg.value() or b"")
        for msg in read_to_end(topic, isolation)
    ]


def assert_nothing_produced(settings: Settings, topic: str) -> None:
    assert read_all(settings, topic, "read_uncommitted") == []


# -- submit -----------------------------------------------------------------------------------
def test_submit_produces_one_start_keyed_by_workflow_id_with_the_definition(
    pushed: CommandClient, settings: Settings
) -> None:
    sent = pushed.submit("media_pipeline", MEDIA_INPUT, priority=2, correlation_id="batch-7")

    records = read_all(settings, pushed.topics.commands)
    assert [key for key, _ in records] == [sent.workflow_id]
    cmd = decode_input(records[0][1])
    assert isinstance(cmd, StartWorkflow)
    assert (cmd.workflow_id, cmd.command_id) == (sent.workflow_id, sent.command_id)
    assert (cmd.name, cmd.version, cmd.priority, cmd.correlation_id) == (
        "media_pipeline",
        1,
        2,
        "batch-7",
    )
    assert cmd.input == MEDIA_INPUT
    assert cmd.definition == json.loads(MEDIA[0].read_text())
    assert sorted(td["name"] for td in cmd.taskdefs) == sorted(
        td["name"] for td in json.loads(MEDIA[1].read_text())
    )
    assert len(cmd.taskdefs) == 6


def test_a_repeated_command_id_answers_with_the_same_workflow_id(
    pushed: CommandClient, settings: Settings
) -> None:
    command_id = f"order-{uuid.uuid4().hex}"
    first = [pushed.submit("media_pipeline", MEDIA_INPUT, command_id=command_id) for _ in range(5)]

    def from_own_client(_: int) -> str:
        with CommandClient(settings) as other:
            return other.submit("media_pipeline", MEDIA_INPUT, command_id=command_id).workflow_id

    with ThreadPoolExecutor(5) as pool:
        concurrent = list(pool.map(from_own_client, range(5)))

    workflow_id = first[0].workflow_id
    assert {s.workflow_id for s in first} | set(concurrent) == {workflow_id}
    records = read_all(settings, pushed.topics.commands)
    assert len(records) == 10  # the client sends every copy; the decider starts one workflow
    assert {key for key, _ in records} == {workflow_id}
    assert {decode_input(value).command_id for _, value in records} == {command_id}


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"priority": 9}, "priority: 9 is greater than the maximum of 8"),
        ({"input": ["not", "an", "object"]}, "input: ['not', 'an', 'object'] is not of type"),
        ({"tenant": ""}, "tenant"),
    ],
)
def test_an_invalid_command_is_refused_and_never_produced(
    pushed: CommandClient, settings: Settings, changes: dict[str, Any], message: str
) -> None:
    args: dict[str, Any] = {"input": MEDIA_INPUT, **changes}
    with pytest.raises(SchemaError, match=r"workflow\.start") as caught:
        pushed.submit("media_pipeline", **args)
    assert message in str(caught.value)
    assert_nothing_produced(settings, pushed.topics.commands)


def test_a_batch_with_one_invalid_input_produces_nothing(
    pushed: CommandClient, settings: Settings
) -> None:
    inputs = [MEDIA_INPUT, MEDIA_INPUT, cast(dict[str, Any], "oops")]
    with pytest.raises(SchemaError, match="input 3 of 3"):
        pushed.submit_many("media_pipeline", inputs)
    assert_nothing_produced(settings, pushed.topics.commands)


def test_an_input_over_the_size_cap_is_refused(pushed: CommandClient, settings: Settings) -> None:
    big = {"blob": "x" * (300 * 1024)}
    with pytest.raises(SchemaError, match=r"over the cap of 262144 bytes") as caught:
        pushed.submit("media_pipeline", big)
    assert "ES_SCHED_RUN_COMMAND_MAX_BYTES" in str(caught.value)
    with pytest.raises(SchemaError, match="over the cap"):
        pushed.signal("wf-1", big)
    assert_nothing_produced(settings, pushed.topics.commands)


def test_an_unknown_definition_is_refused(pushed: CommandClient, settings: Settings) -> None:
    with pytest.raises(UnknownDefinition, match=r"'no_such_flow'.*es-sched defs push"):
        pushed.submit("no_such_flow", {})
    with pytest.raises(UnknownDefinition, match="'media_pipeline' version 7"):
        pushed.submit("media_pipeline", MEDIA_INPUT, version=7)
    assert_nothing_produced(settings, pushed.topics.commands)


# -- control commands ---------------------------------------------------------------------------
def test_control_commands_are_keyed_by_their_workflow(
    client: CommandClient, settings: Settings
) -> None:
    wf = "wf-control"
    sent = [
        client.cancel(wf, "user asked", expected_version=3, command_id="c-1"),
        client.terminate(wf, "operator"),
        client.retry(wf),
        client.pause(wf),
        client.resume(wf),
        client.signal(wf, {"approved": True}, ref="review", status="FAILED"),
    ]
    records = read_all(settings, client.topics.commands)
    assert {key for key, _ in records} == {wf}
    decoded = [decode_input(value) for _, value in records]
    assert [type(d).__name__ for d in decoded] == [
        "CancelWorkflow",
        "TerminateWorkflow",
        "RetryWorkflow",
        "PauseWorkflow",
        "ResumeWorkflow",
        "SignalWorkflow",
    ]
    assert [d.command_id for d in decoded] == [s.command_id for s in sent]  # one key, in order
    assert decoded[0] == CancelWorkflow("c-1", wf, expected_version=3, reason="user asked")
    assert decoded[-1] == SignalWorkflow(
        sent[-1].command_id, wf, ref="review", status="FAILED", output={"approved": True}
    )
    with pytest.raises(SchemaError, match="status"):
        client.signal(wf, {}, status="MAYBE")
    assert len(read_all(settings, client.topics.commands)) == 6


def test_each_command_answers_with_its_own_token_when_threads_share_the_client(
    client: CommandClient, settings: Settings
) -> None:
    """The API shares one client between its threads, and one thread's ``flush`` may serve
    another's delivery report. Every command's token must name its own record: a token read
    as "the last delivered for this workflow" once answered a terminate with an older
    command's offset, and the next read still showed RUNNING."""
    workflows = [f"wf-{n % 4}" for n in range(200)]  # four workflows, many commands each

    def pause(wf: str) -> tuple[str, str, str | None]:
        sent = client.pause(wf)
        return wf, sent.command_id, sent.token

    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(pause, workflows))
    at = {
        f"{msg.partition()}:{msg.offset()}": decode_input(msg.value() or b"").command_id
        for msg in read_to_end(client.topics.commands, "read_committed")
    }
    assert len(at) == len(workflows)
    assert [at.get(token or "") for _, _, token in answers] == [cmd for _, cmd, _ in answers]


# -- definitions --------------------------------------------------------------------------------
def test_push_writes_every_document_under_its_key(
    client: CommandClient, settings: Settings
) -> None:
    keys = client.push_definitions(MEDIA)
    assert keys[0] == "workflow:media_pipeline:1"
    assert len(keys) == 7  # the workflow and six TaskDefs
    records = read_all(settings, client.topics.definitions)
    assert [key for key, _ in records] == keys
    assert json.loads(records[0][1]) == json.loads(MEDIA[0].read_text())


def test_push_of_a_broken_definition_produces_nothing(
    client: CommandClient, settings: Settings, tmp_path: Path
) -> None:
    broken = json.loads(MEDIA[0].read_text())
    broken["tasks"][0]["type"] = "NO_SUCH_TYPE"
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(broken))
    client.ensure_topics()
    with pytest.raises(DefinitionError, match="NO_SUCH_TYPE") as caught:
        client.push_definitions([path, MEDIA[1]])
    assert all(p.startswith("media_pipeline v1") for p in caught.value.problems)
    assert_nothing_produced(settings, client.topics.definitions)


# -- wait ---------------------------------------------------------------------------------------
def _event(workflow_id: str, seq: int, payload: Any) -> Event:
    return Event(
        event_id=event_id(workflow_id, seq),
        workflow_id=workflow_id,
        seq=seq,
        occurred_at=datetime.now(UTC),
        causation_id="test",
        correlation_id=workflow_id,
        payload=payload,
    )


def test_wait_reports_final_statuses_from_the_events_topic(
    client: CommandClient, settings: Settings
) -> None:
    done, failed, paused, silent = (f"wf-{n}-{uuid.uuid4().hex[:6]}" for n in range(4))
    old = _event(done, 1, WorkflowEnded("FAILED", "an earlier life"))
    producer = clients.producer(connection(settings.kafka))
    client.ensure_topics()
    producer.produce(client.topics.events, encode_event(old), done.encode())
    producer.flush(10)

    start = client.start_watermarks()  # what a submitter captures before producing commands
    for wf, payload in [
        (done, WorkflowCompleted({"ok": True})),
        (failed, WorkflowEnded("FAILED", "transcode failed")),
        (paused, WorkflowPaused()),
    ]:
        producer.produce(client.topics.events, encode_event(_event(wf, 2, payload)), wf.encode())
    producer.produce(client.topics.events, b"not json", b"someone-else")
    assert producer.flush(10) == 0

    statuses = client.wait([done, failed, paused, silent], 3.0, start)
    assert statuses == {done: "COMPLETED", failed: "FAILED", paused: None, silent: None}
    assert client.wait([failed], 5.0)[failed] == "FAILED"  # no start: read from the beginning
    assert client.wait([], 1.0) == {}


# -- CLI ----------------------------------------------------------------------------------------
def _cli(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    return es_sched(*args, env=vars_of(settings), timeout_s=120)


def test_cli_pushes_and_submits_one_workflow_per_jsonl_line(
    settings: Settings, tmp_path: Path
) -> None:
    pushed = _cli(settings, "defs", "push", *map(str, MEDIA))
    assert pushed.returncode == 0, pushed.stderr
    assert "pushed workflow:media_pipeline:1" in pushed.stdout

    lines = tmp_path / "inputs.jsonl"
    lines.write_text("\n".join(json.dumps({**MEDIA_INPUT, "asset_id": f"a{i}"}) for i in range(3)))
    res = _cli(settings, "submit", "media_pipeline", "--input-file", str(lines), "--json")
    assert res.returncode == 0, res.stderr
    rows = json.loads(res.stdout)
    assert len(rows) == 3
    assert len({row["workflow_id"] for row in rows}) == 3

    commands = read_all(settings, f"{settings.kafka.topic_prefix}.commands")
    assert sorted(key or "" for key, _ in commands) == sorted(row["workflow_id"] for row in rows)


def test_cli_refuses_a_bad_jsonl_line_and_produces_nothing(
    settings: Settings, tmp_path: Path
) -> None:
    assert _cli(settings, "defs", "push", *map(str, MEDIA)).returncode == 0
    lines = tmp_path / "inputs.jsonl"
    lines.write_text(json.dumps(MEDIA_INPUT) + "\n\n{not json}\n" + json.dumps(MEDIA_INPUT))
    res = _cli(settings, "submit", "media_pipeline", "--input-file", str(lines))
    assert res.returncode == 1
    assert f"{lines}:3" in " ".join(res.stderr.split())
    assert res.stdout == ""
    assert_nothing_produced(settings, f"{settings.kafka.topic_prefix}.commands")


def test_cli_submit_wait_prints_the_final_statuses(settings: Settings, tmp_path: Path) -> None:
    """The decider is stood in for by hand-made final events, produced once the commands arrived
    (so after the CLI took its start offsets)."""
    assert _cli(settings, "defs", "push", *map(str, MEDIA)).returncode == 0
    lines = tmp_path / "inputs.jsonl"
    lines.write_text(json.dumps(MEDIA_INPUT) + "\n" + json.dumps(MEDIA_INPUT) + "\n")
    command_id = uuid.uuid4().hex
    ok, bad = (workflow_id_for_command(f"{command_id}:{n}") for n in (1, 2))
    args = ["submit", "media_pipeline", "--input-file", str(lines), "--command-id", command_id]
    env = {**os.environ, **vars_of(settings), "PYTHONUNBUFFERED": "1"}
    with subprocess.Popen(
        [sys.executable, "-m", "es_sched", *args, "--wait", "60", "--json"],
        cwd=ROOT,
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as proc:
        commands = f"{settings.kafka.topic_prefix}.commands"

        def arrived() -> bool:
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            return len(_committed_if_exists(settings, commands)) >= 2

        wait_until(arrived, 60, "the two commands on the commands topic")
        producer = clients.producer(connection(settings.kafka))
        for wf, payload in [(ok, WorkflowCompleted({})), (bad, WorkflowEnded("FAILED", "no"))]:
            value = encode_event(_event(wf, 1, payload))
            producer.produce(f"{settings.kafka.topic_prefix}.events", value, wf.encode())
        assert producer.flush(10) == 0
        out, err = proc.communicate(timeout=90)
    assert proc.returncode == 1, err  # one workflow did not complete
    rows = json.loads(out)
    assert [(r["workflow_id"], r["status"]) for r in rows] == [(ok, "COMPLETED"), (bad, "FAILED")]


def _committed_if_exists(settings: Settings, topic: str) -> list[Record]:
    admin = AdminClient(connection(settings.kafka).config())
    return read_all(settings, topic) if topic in admin.list_topics(timeout=10).topics else []
