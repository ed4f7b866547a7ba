"""Port for evaluating workflow scripts (INLINE tasks, SWITCH/DO_WHILE javascript conditions).

The domain decides *when* a script runs and what it sees; an engine adapter (for example
``es_sched.scripting.quickjs.QuickJsEngine``) decides *how*. This module holds only the contract,
so the core stays pure and tests can substitute a fake engine.

Contract for every ``ScriptEngine``:

* The script sees one global, ``$``, bound to a deep copy of ``bindings`` (Netflix Conductor
  semantics: the task's resolved ``inputParameters``). Bindings must be JSON-compatible; passing
  anything else is a programming error and may raise.
* A script may be a plain expression (``$.value * 2``), an immediately invoked function
  (``(function () { return $.a + $.b; })()``) or a statement list whose completion value is the
  result (``if ($.x > 1) { 'big'; } else { 'small'; }``).
* Scripts must be deterministic: decisions are event-sourced and replayed, so a replay must reach
  the same result from the same bindings. Engines refuse sources of nondeterminism (clock, random
  numbers) and share no state between evaluations.
* An engine never raises for a script's own failure (syntax error, thrown exception, time or
  memory limit, a result that is not JSON, a result that is too large). It returns
  ``ScriptResult(ok=False, error=...)`` with a stable one-line reason instead. It raises only for
  programming errors on the caller's side.
* On success ``value`` is JSON-compatible: dict, list, str, int, float, bool or None (JavaScript's
  ``undefined`` and ``null`` both become None).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from es_sched.domain.pickling import frozen_by_constructor


@dataclass(frozen=True)
class ScriptResult:
    """The outcome of one evaluation: a JSON-compatible value, or a one-line reason it failed."""

    ok: bool
    value: Any = None  # a JSON-compatible value (dict/list/str/int/float/bool/None) when ok
    error: str | None = None  # a one-line human reason when not ok


class ScriptEngine(Protocol):
    """Evaluates a workflow script with ``$`` bound to ``bindings``; never raises for the script."""

    def evaluate(self, expression: str, bindings: Mapping[str, Any]) -> ScriptResult: ...


frozen_by_constructor(globals())  # pickled through constructors (domain.pickling, ADR 51)
