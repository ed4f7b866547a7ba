"""The command side: validated commands produced to Kafka, keyed by workflow id.

``CommandClient`` is the Python API (``submit``, ``submit_many``, ``cancel``, ``terminate``,
``retry``, ``pause``, ``resume``, ``signal``, ``push_definitions``, ``wait``); the CLI commands
in ``es_sched.cli.commands`` are thin wrappers around it. Every command is checked against
``schemas/commands/`` and the size cap before it is produced, so an invalid one never reaches
Kafka; a repeated command id addresses the same workflow id, and the decider starts it once.
"""

from es_sched.commands.client import CommandClient, Submitted
from es_sched.commands.prepare import (
    Resolved,
    UnknownDefinition,
    definition_problems,
    prepare,
    resolve,
    terminal_status,
)

__all__ = [
    "CommandClient",
    "Resolved",
    "Submitted",
    "UnknownDefinition",
    "definition_problems",
    "prepare",
    "resolve",
    "terminal_status",
]
