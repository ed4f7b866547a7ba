"""``CommandClient``: the Python producer API of es-sched's command side.

Guarantees:
- **Validated before produce.** Every command is checked against its JSON Schema in
  ``schemas/commands/`` and against the size cap (``ES_SCHED_RUN_COMMAND_MAX_BYTES``, 256 KiB by
  default) before it is handed to the producer; a refused command raises ``SchemaError`` and
  nothing of the call reaches Kafka (``submit_many`` checks every command before producing any).
  ``push_definitions`` likewise refuses the whole set when one document has a problem.
- **Durable when a call returns.** One idempotent producer (``acks=all``) per client; every
  public call flushes, and a record the broker refused or that is still undelivered when the
  flush times out raises ``InfrastructureError``.
- **Keyed by workflow id.** Commands go to the ``commands`` topic with the workflow id as key
  (murmur2), so a workflow's commands keep their order and meet its state on one partition.
- **Command-id idempotency.** A StartWorkflow's workflow id is ``uuid5`` of its command id, so
  resubmitting a command id answers with the same workflow id, and the decider, which dedupes by
  command id, starts no second workflow. Submit with your own ``command_id`` to retry safely.

StartWorkflow embeds the definition, its TaskDefs and its sub-workflows' definitions as read from
the ``definitions`` topic, so the decider never needs the registry. ``wait`` reads the events
topic (``read_committed``, assigned partitions, no consumer group offsets) from watermarks taken
before submitting; it is a read-only observer, so records that are not final events of the
awaited workflows are skipped unread.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from confluent_kafka import KafkaError, KafkaException, Message
from confluent_kafka import Producer as KafkaProducer

from es_sched.commands import files, watch
from es_sched.commands.prepare import (
    Outcome,
    definition_problems,
    prepare,
    resolve,
)
from es_sched.domain import commands as c
from es_sched.domain import sla
from es_sched.domain.definitions import DefinitionError
from es_sched.domain.ids import workflow_id_for_command
from es_sched.errors import InfrastructureError, SchemaError
from es_sched.kafka import clients
from es_sched.kafka.connection import connection
from es_sched.kafka.registry import DefinitionRegistry
from es_sched.kafka.topics import Topics, ensure_topics, topics_for
from es_sched.serialization import SchemaCatalog
from es_sched.serialization.definitions import encode_definition, key_of
from es_sched.settings import Settings, load_settings

JSON = dict[str, Any]
T = TypeVar("T")
SETTLING = frozenset(  # errors of a topic created a moment ago, before its leaders are known
    {
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError._UNKNOWN_PARTITION,
    }
)


@dataclass(frozen=True)
class Submitted:
    """A command accepted by Kafka: the workflow it addresses, its idempotency key and its
    read-your-writes token (``PARTITION:OFFSET`` of its own record on the commands topic; see
    ``es_sched.projections.read_your_writes``)."""

    workflow_id: str
    command_id: str
    token: str | None = None


class _Delivery:
    """One produced record's fate, set by its delivery report on whichever thread serves it.

    The API shares one client between its threads, and another thread's ``flush`` may serve
    this record's report after this thread's ``flush`` returned: so a caller waits for its own
    records, never reads "the last delivered" (that answered a terminate with the token of an
    older command, and the next read still showed RUNNING)."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.error: str | None = None
        self.token = ""

    def report(self, err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            self.error = f"{msg.topic()} key {msg.key()!r}: {err.str()}"
        else:
            self.token = f"{msg.partition() or 0}:{msg.offset() or 0}"
        self.done.set()


class CommandClient:
    def __init__(self, settings: Settings, flush_timeout_s: float = 30.0) -> None:
        self.settings = settings
        self.topics: Topics = topics_for(settings)
        self.flush_timeout_s = flush_timeout_s
        self._bootstrap = connection(settings.kafka)
        self._catalog = SchemaCatalog()
        self._producer: KafkaProducer | None = None
        self._registry: DefinitionRegistry | None = None
        self._topics_ready = False
        # The registry's consumer and dicts are not thread-safe; the API calls from many threads.
        self._registry_lock = threading.Lock()

    @classmethod
    def from_env(cls) -> CommandClient:
        return cls(load_settings())

    # -- starting workflows -----------------------------------------------------------------
    def submit(
        self,
        name: str,
        input: JSON,
        version: int | None = None,
        priority: int = 4,
        tenant: str | None = None,
        command_id: str | None = None,
        correlation_id: str | None = None,
        *,
        actor: str | None = None,
        sla_tier: str | None = None,
        deadline: datetime | None = None,
    ) -> Submitted:
        ids = [command_id] if command_id is not None else None
        return self.submit_many(
            name,
            [input],
            version,
            priority,
            tenant,
            ids,
            correlation_id,
            actor=actor,
            sla_tier=sla_tier,
            deadline=deadline,
        )[0]

    def submit_many(
        self,
        name: str,
        inputs: Sequence[JSON],
        version: int | None = None,
        priority: int = 4,
        tenant: str | None = None,
        command_ids: Sequence[str] | None = None,
        correlation_id: str | None = None,
        sources: Sequence[str] | None = None,
        *,
        actor: str | None = None,
        sla_tier: str | None = None,
        deadline: datetime | None = None,
    ) -> list[Submitted]:
        """Start one workflow per input; every command is checked before any is produced.

        ``sources`` label the inputs in error messages (the CLI passes ``file:line``).
        ``sla_tier`` and ``deadline`` (ADR 67): without a tier, ``ES_SCHED_SLA_DEFAULT_TIER``'s.
        """
        if command_ids is not None and len(command_ids) != len(inputs):
            raise ValueError("command_ids must have one id per input")
        tier = sla_tier if sla_tier is not None else (self.settings.sla.default_tier or None)
        problem = sla.refusal(tier, deadline, datetime.now(UTC), submitting=True)
        if problem is not None:
            raise SchemaError(problem)
        self.ensure_topics()
        with self._registry_lock:
            resolved = resolve(self._registry_caught_up(), name, version)
        records: list[tuple[str, bytes]] = []
        submitted: list[Submitted] = []
        for i, workflow_input in enumerate(inputs):
            command_id = command_ids[i] if command_ids is not None else uuid.uuid4().hex
            workflow_id = workflow_id_for_command(command_id)
            cmd = c.StartWorkflow(
                input_id=command_id,
                workflow_id=workflow_id,
                name=name,
                version=resolved.definition.get("version", version),
                input=workflow_input,
                priority=priority,
                tenant=tenant,
                correlation_id=correlation_id,
                definition=resolved.definition,
                taskdefs=resolved.taskdefs,
                subworkflow_definitions=resolved.subworkflow_definitions,
                actor=actor,
                sla_tier=tier,
                deadline=deadline,
                sla_retries=None if tier is None else self.settings.sla.retries[tier],
            )
            try:
                records.append((workflow_id, self._prepare(cmd)))
            except SchemaError as exc:
                label = sources[i] if sources is not None else f"input {i + 1} of {len(inputs)}"
                raise SchemaError(f"{label}: {exc}") from None
            submitted.append(Submitted(workflow_id, command_id))
        sent = self._deliver([self._produce(self.topics.commands, k, v) for k, v in records])
        return [replace(s, token=d.token) for s, d in zip(submitted, sent, strict=True)]

    # -- acting on running workflows --------------------------------------------------------
    def cancel(
        self,
        wf_id: str,
        reason: str = "canceled",
        expected_version: int | None = None,
        command_id: str | None = None,
        *,
        actor: str | None = None,
    ) -> Submitted:
        return self._send(
            c.CancelWorkflow, wf_id, expected_version, command_id, actor, reason=reason
        )

    def terminate(
        self,
        wf_id: str,
        reason: str = "terminated",
        expected_version: int | None = None,
        command_id: str | None = None,
        *,
        actor: str | None = None,
    ) -> Submitted:
        return self._send(
            c.TerminateWorkflow, wf_id, expected_version, command_id, actor, reason=reason
        )

    def retry(
        self,
        wf_id: str,
        expected_version: int | None = None,
        command_id: str | None = None,
        *,
        actor: str | None = None,
    ) -> Submitted:
        return self._send(c.RetryWorkflow, wf_id, expected_version, command_id, actor)

    def pause(
        self,
        wf_id: str,
        expected_version: int | None = None,
        command_id: str | None = None,
        *,
        actor: str | None = None,
    ) -> Submitted:
        return self._send(c.PauseWorkflow, wf_id, expected_version, command_id, actor)

    def resume(
        self,
        wf_id: str,
        expected_version: int | None = None,
        command_id: str | None = None,
        *,
        actor: str | None = None,
    ) -> Submitted:
        return self._send(c.ResumeWorkflow, wf_id, expected_version, command_id, actor)

    def signal(
        self,
        wf_id: str,
        output: JSON,
        ref: str | None = None,
        status: str = "COMPLETED",
        expected_version: int | None = None,
        command_id: str | None = None,
        *,
        actor: str | None = None,
    ) -> Submitted:
        return self._send(
            c.SignalWorkflow,
            wf_id,
            expected_version,
            command_id,
            actor,
            ref=ref,
            status=status,
            output=output,
        )

    def restart(
        self,
        wf_id: str,
        latest_of: str | None = None,
        input: JSON | None = None,
        expected_version: int | None = None,
        command_id: str | None = None,
        *,
        actor: str | None = None,
    ) -> Submitted:
        """Restart a workflow in a terminal state from its beginning; ``latest_of`` (its
        definition's name) runs it with the latest registered version of that definition,
        resolved here and embedded as a start embeds it (Conductor's ``useLatestDefinitions``)."""
        pinned: dict[str, Any] = {}
        if latest_of is not None:
            self.ensure_topics()
            resolved = resolve(self._registry_caught_up(), latest_of, None)
            pinned = {
                "definition": resolved.definition,
                "taskdefs": resolved.taskdefs,
                "subworkflow_definitions": resolved.subworkflow_definitions,
            }
        return self._send(
            c.RestartWorkflow, wf_id, expected_version, command_id, actor, input=input, **pinned
        )

    def rerun(
        self,
        wf_id: str,
        task: str | None = None,
        task_input: JSON | None = None,
        workflow_input: JSON | None = None,
        expected_version: int | None = None,
        command_id: str | None = None,
        *,
        actor: str | None = None,
    ) -> Submitted:
        """Rerun a workflow in a terminal state from ``task`` (a task id or reference name);
        without one, restart it with ``workflow_input`` (Conductor's rerun)."""
        return self._send(
            c.RerunWorkflow,
            wf_id,
            expected_version,
            command_id,
            actor,
            task=task,
            task_input=task_input,
            workflow_input=workflow_input,
        )

    def review(
        self,
        wf_id: str,
        task_id: str,
        decision: str,
        input: JSON | None = None,
        reason: str = "",
        expected_version: int | None = None,
        command_id: str | None = None,
        *,
        actor: str | None = None,
    ) -> Submitted:
        """Decide on a task parked for review (ADR 71): ``retry`` (with ``input``, the whole
        input as edited, or the parked attempt's) or ``fail``; the decider refuses the rest."""
        return self._send(
            c.ReviewTask,
            wf_id,
            expected_version,
            command_id,
            actor,
            task_id=task_id,
            decision=decision,
            input=input,
            reason=reason,
        )

    def _send(
        self,
        cls: type[c.Command],
        wf_id: str,
        expected_version: int | None,
        command_id: str | None,
        actor: str | None = None,
        **fields: Any,
    ) -> Submitted:
        command_id = command_id or uuid.uuid4().hex
        cmd = cls(
            input_id=command_id,
            workflow_id=wf_id,
            expected_version=expected_version,
            actor=actor,
            **fields,
        )
        value = self._prepare(cmd)
        self.ensure_topics()
        (sent,) = self._deliver([self._produce(self.topics.commands, wf_id, value)])
        return Submitted(wf_id, command_id, sent.token)

    def _prepare(self, cmd: c.Input) -> bytes:
        return prepare(cmd, self._catalog, self.settings.runtime.command_max_bytes)

    # -- definitions ------------------------------------------------------------------------
    def push_definitions(self, paths: Iterable[Path]) -> list[str]:
        """Register workflow definitions and TaskDefs; all or nothing. Returns the keys written."""
        return self.push_documents(files.load(paths))

    def push_documents(self, docs: files.Documents) -> list[str]:
        """``push_definitions`` for documents already in memory (the HTTP API's bodies)."""
        problems = definition_problems(docs, self._catalog)
        if problems:
            raise DefinitionError(problems)
        records = [(key_of("workflow", d), encode_definition(d)) for d in docs.workflows] + [
            (key_of("taskdef", td), encode_definition(td)) for td in docs.taskdefs
        ]
        self.ensure_topics()
        self._deliver([self._produce(self.topics.definitions, k, v) for k, v in records])
        return [key for key, _ in records]

    # -- waiting for outcomes ---------------------------------------------------------------
    def start_watermarks(self) -> dict[int, int]:
        """The end of every events partition now: call before producing, pass to ``wait`` or
        ``outcome``."""
        self.ensure_topics()
        events = self.topics.events
        return _settled(
            f"reading the offsets of {events}", lambda: watch.end_offsets(self._bootstrap, events)
        )

    def wait(
        self,
        workflow_ids: Iterable[str],
        timeout_s: float,
        start: Mapping[int, int] | None = None,
    ) -> dict[str, str | None]:
        """Final status per workflow (COMPLETED, FAILED, ..., REJECTED for a start refused), None
        if not final by the timeout.

        Reads from ``start`` (``start_watermarks()`` taken before submitting); without it from
        the beginning of the events topic, which is correct but slow on a long history.
        """
        self.ensure_topics()
        return watch.final_statuses(
            self._bootstrap, self.topics.events, self._catalog, workflow_ids, timeout_s, start
        )

    def outcome(
        self, sent: Submitted, timeout_s: float, start: Mapping[int, int] | None = None
    ) -> Outcome | None:
        """What the decider made of one command: its events (accepted) or its rejection, read
        back by ``causation_id``; None when nothing came within ``timeout_s``.

        A rejection ends the wait at once. An accepted command's events were written in one
        transaction, consecutively in its workflow's partition: they are all read when that
        partition yields a record of another cause, or is read to its end.
        """
        self.ensure_topics()
        return watch.outcome_of(
            self._bootstrap, self.topics.events, self._catalog, sent.command_id, timeout_s, start
        )

    # -- Kafka plumbing ---------------------------------------------------------------------
    def flush(self, timeout_s: float = 30.0) -> None:
        """Wait for every produced record; raise if one is still undelivered."""
        if self._producer is None:
            return
        remaining = self._producer.flush(timeout_s)
        if remaining:
            raise InfrastructureError(
                f"{remaining} record(s) still undelivered after {timeout_s:g}s: "
                f"is Kafka reachable at {self._bootstrap}?"
            )

    def close(self) -> None:
        try:
            self.flush(self.flush_timeout_s)
        finally:
            if self._registry is not None:
                self._registry.close()
                self._registry = None

    def __enter__(self) -> CommandClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def ensure_topics(self) -> None:
        """Create the es-sched topics that are missing (once per client)."""
        if not self._topics_ready:
            ensure_topics(self._bootstrap, self.topics)
            self._topics_ready = True

    def definitions(self) -> tuple[dict[tuple[str, int], JSON], dict[str, JSON]]:
        """Copies of the registered workflow definitions ((name, version) -> doc) and TaskDefs
        (name -> doc), caught up with the definitions topic as it is now."""
        self.ensure_topics()
        with self._registry_lock:
            registry = self._registry_caught_up()
            return dict(registry.workflows), dict(registry.taskdefs)

    def _registry_caught_up(self) -> DefinitionRegistry:
        if self._registry is None:
            self._registry = DefinitionRegistry(self._bootstrap, self.topics.definitions)
        registry = self._registry
        _settled(f"reading {self.topics.definitions}", registry.catch_up)
        return registry

    def _produce(self, topic: str, key: str, value: bytes) -> _Delivery:
        if self._producer is None:
            self._producer = clients.producer(self._bootstrap)
        delivery = _Delivery()
        while True:
            try:
                self._producer.produce(topic, value, key.encode(), on_delivery=delivery.report)
                break
            except BufferError:  # the local queue is full: let deliveries drain, then retry
                self._producer.poll(0.5)
            except KafkaException as exc:
                raise InfrastructureError(f"cannot produce to {topic}: {exc}") from exc
        self._producer.poll(0)
        return delivery

    def _deliver(self, sent: list[_Delivery]) -> list[_Delivery]:
        """Wait for these records' own delivery reports; raise if one was refused or is still
        undelivered after the flush timeout."""
        deadline = time.monotonic() + self.flush_timeout_s
        self.flush(self.flush_timeout_s)
        late = [d for d in sent if not d.done.wait(max(0.0, deadline - time.monotonic()))]
        if late:
            raise InfrastructureError(
                f"{len(late)} record(s) without a delivery report after "
                f"{self.flush_timeout_s:g}s: is Kafka reachable at {self._bootstrap}?"
            )
        errors = [d.error for d in sent if d.error is not None]
        if errors:
            more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
            raise InfrastructureError(f"Kafka refused a record: {errors[0]}{more}")
        return sent


def _settled(what: str, read: Callable[[], T], patience_s: float = 15.0) -> T:
    """``read()``, retried while a freshly created topic is still electing its leaders."""
    deadline = time.monotonic() + patience_s
    while True:
        try:
            return read()
        except KafkaException as exc:
            if exc.args[0].code() not in SETTLING or time.monotonic() > deadline:
                raise InfrastructureError(f"{what}: {exc}") from exc
        time.sleep(0.2)
