"""The gateway lease: what every API process must find about a task an HTTP worker polled.

A poll and its update may land on different API processes behind one load balancer, so the
lease a poll handed out (gateway worker, epoch, token, attempt) and the HTTP worker it went to
are written to a store those processes share before the poll answers, and any process's update
reads them back (ADR 24). ``LeaseStore`` is what the gateway worker, the update rules
(``updates``) and the Conductor routes need of that store; its implementation on PostgreSQL is
``es_sched.api.gateway.store``, built by the API process (it uses the PostgreSQL helpers of
``es_sched.projections``, which the layers contract keeps out of ``es_sched.workers``).

``end`` records the first outcome an update sent (``COMPLETED``, ``FAILED``...): the SDK's
retry of the same result finds it and gets the same answer; the gateway that holds the lease
finds it too (``ended_of``) and drops the task from its status. ``lease_over`` records a lease
the dispatcher ended (a ``cancel`` on the gateway's partition), so a late update is refused at
once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from es_sched.serialization import wire


@dataclass(frozen=True)
class HeldLease:
    task_id: str
    workflow_id: str
    task_type: str
    attempt: int
    lease_epoch: int
    lease_token: str
    gateway_id: str
    http_worker_id: str
    ended: str | None
    lease_over: str | None


def as_assignment(lease: HeldLease) -> wire.Assignment:
    """The lease as the assignment that granted it (what the report builders take)."""
    return wire.Assignment(
        lease.gateway_id,
        lease.workflow_id,
        lease.task_id,
        lease.task_type,
        lease.attempt,
        lease.lease_epoch,
        lease.lease_token,
        "",
        {},
    )


class LeaseStore(Protocol):
    def handed(self, gateway_id: str, http_worker_id: str, tasks: list[wire.Assignment]) -> None:
        """The poll hands ``tasks`` to ``http_worker_id``: written before it answers."""

    def taken_by(self, gateway_id: str) -> list[HeldLease]:
        """The tasks HTTP workers took from ``gateway_id`` that have not ended."""

    def lease(self, task_id: str) -> HeldLease | None: ...

    def end(
        self, task_id: str, workflow_id: str, http_worker_id: str, outcome: str
    ) -> tuple[HeldLease | None, str | None]:
        """The lease as it was, and its first outcome: ``outcome`` recorded now when the lease
        is the caller's (its workflow, its HTTP worker or none given, not ended by the
        dispatcher) and had none, the earlier one when it had, None when it is not the
        caller's."""

    def lease_over(self, task_id: str, lease_epoch: int, reason: str) -> None: ...

    def ended_of(self, gateway_id: str, task_ids: list[str]) -> set[str]:
        """Which of these tasks, held by ``gateway_id``, some API process reported ended."""

    def polled(self, task_type: str, domain: str, worker_id: str) -> None:
        """An HTTP worker polled for ``task_type`` (``GET /api/tasks/queue/polldata``)."""

    def poll_data(self, task_type: str) -> list[dict[str, Any]]: ...

    def add_logs(self, task_id: str, lines: list[dict[str, Any]]) -> None:
        """Log lines an HTTP worker sent while the task runs, kept until its outcome carries
        them (ADR 60)."""

    def logs(self, task_id: str) -> list[dict[str, Any]]:
        """The lines kept for ``task_id``, oldest first (``{"at", "log"}``)."""

    def close(self) -> None: ...
