"""Real services for development and CI: Kafka (KRaft), PostgreSQL and OpenSearch, no Docker needed.

``Stack`` is the entry point; see ``es_sched.stack.manager``.
"""

from es_sched.stack.manager import ROLES, Role, ServiceStatus, Stack

__all__ = ["ROLES", "Role", "ServiceStatus", "Stack"]
