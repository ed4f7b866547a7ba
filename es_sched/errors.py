"""The one exception tree of es-sched.

Every error raised on purpose by es-sched is an ``EsSchedError``. Adapters translate driver
exceptions (confluent-kafka, psycopg, HTTP clients, subprocesses) into ``InfrastructureError`` at
their edge, so callers never need to know which driver sits behind a port.

Branches:
    DomainError          a command or input that the workflow rules refuse
    ConcurrencyError     an ``expected_version`` that no longer holds
    SchemaError          a document that does not match its JSON Schema or cannot be decoded
    ConfigError          a setting that is missing or malformed (names the variable)
    InfrastructureError  a service that is missing, unreachable or misbehaving
        StackError       the local stack could not be installed, started or stopped
"""

from __future__ import annotations


class EsSchedError(Exception):
    """Root of every error es-sched raises on purpose."""


class DomainError(EsSchedError):
    """A command or input refused by the workflow rules."""


class ConcurrencyError(DomainError):
    """An optimistic-concurrency expectation (``expected_version``) failed."""


class SchemaError(EsSchedError):
    """A document does not match its schema or cannot be decoded."""


class ConfigError(EsSchedError):
    """A setting is missing or malformed; the message names the environment variable."""


class InfrastructureError(EsSchedError):
    """A service es-sched depends on is missing, unreachable or failing."""


class StackError(InfrastructureError):
    """The local service stack could not be installed, started, checked or stopped."""


class ScriptSandboxUnavailable(InfrastructureError):
    """The script sandbox process could not be started (ADR 76): the host's fault, never the
    script's or the input's, so the decider lets it end the batch instead of dead-lettering."""
