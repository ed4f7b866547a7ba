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
* A breach of a limit that depends on the machine (CPU time, the sandbox process dying) is not
  a function of the script and its bindings, so replay cannot recompute it (ADR 76). Its reason
  is made by ``breach``: it names the limit and ends with the evaluation's ``fingerprint``, and
  it lands in the recorded ``task.failed``. ``RecordedBreaches`` answers a replayed evaluation
  with the reason the record holds for its fingerprint, without running it again, and leaves
  every other evaluation to the engine.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol

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


# A recorded reason holds a breach when, after at most one prefix the decider put before the
# engine's reason ("switch evaluation failed: "), it is exactly what ``breach`` made. A script's
# own thrown message always comes after "script error: ", so it cannot pass for one.
_BREACH: Final = re.compile(
    r"^(?:[A-Za-z ]+: )?(script (?:exceeded|stopped) [^\[\]]* \[script (?P<fp>[0-9a-f]{16})\])$"
)


def fingerprint(expression: str, bindings: Mapping[str, Any]) -> str:
    """16 hex digits naming one evaluation: its source and bindings, as canonical JSON."""
    text = json.dumps([expression, dict(bindings)], sort_keys=True, allow_nan=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def breach(what: str, expression: str, bindings: Mapping[str, Any]) -> str:
    """The reason of a limit breach, ``what`` being e.g. "exceeded its time limit of 100 ms"."""
    return f"script {what} [script {fingerprint(expression, bindings)}]"


def recorded_breach(reason: str) -> tuple[str, str] | None:
    """(fingerprint, the engine's reason) when ``reason`` records a breach, else None."""
    found = _BREACH.match(reason)
    return (found["fp"], found[1]) if found else None


class RecordedBreaches:
    """A ``ScriptEngine`` for replay: evaluations the record says breached a limit get the
    recorded reason (they are never run again: an infinite loop would cost its whole limit
    again, and a faster machine would finish it); the rest go to ``engine``."""

    def __init__(self, engine: ScriptEngine, reasons: Iterable[str]) -> None:
        self._engine = engine
        self._known = dict(filter(None, map(recorded_breach, reasons)))

    def evaluate(self, expression: str, bindings: Mapping[str, Any]) -> ScriptResult:
        if self._known:
            reason = self._known.get(fingerprint(expression, bindings))
            if reason is not None:
                return ScriptResult(ok=False, error=reason)
        return self._engine.evaluate(expression, bindings)


frozen_by_constructor(globals())  # pickled through constructors (domain.pickling, ADR 51)
