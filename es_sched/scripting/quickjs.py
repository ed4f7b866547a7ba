"""Sandboxed JavaScript for INLINE tasks and SWITCH/DO_WHILE conditions, on QuickJS.

``QuickJsEngine`` implements ``es_sched.domain.scripts.ScriptEngine`` with Netflix Conductor
semantics: the script sees ``$`` bound to the task's inputs and its result is the completion value
of the source, so a plain expression, an IIFE and a statement list all work.

Guarantees:

* Isolation. Every ``evaluate()`` builds a fresh QuickJS runtime and context and drops it
  afterwards: nothing a script defines or mutates survives into the next evaluation, and
  calls on different threads never share a runtime. No host functions are exposed, so a script
  has no I/O, no modules, no timers and no way back into Python.
* Bindings are data. The source and the bindings cross into the engine as one JSON string that is
  ``JSON.parse``-d inside it; no JavaScript is ever assembled from values.
* Determinism. Decisions are event-sourced and replayed, so a replay must reach the same result.
  ``Math.random`` and ``Date`` (constructor and statics, which also depend on the host time zone)
  throw ``Error("... is not available: workflow scripts must be deterministic")`` and QuickJS's
  hidden ``__date_clock`` is removed.
* Limits. ``time_limit_ms`` of CPU time per evaluation (QuickJS's interrupt handler reads C
  ``clock()``, the CPU time of the whole process, so other busy threads make it trip sooner: it is
  a ceiling against runaway scripts, not a timer), ``memory_limit_bytes`` of JavaScript heap
  (bindings included), a fixed stack and ``max_result_bytes`` of UTF-8 JSON result.
* Conductor compatibility. Arrays also answer ``get(i)`` and ``size()``, as the Java lists of
  Conductor's GraalJS do, so scripts written for Conductor run unchanged.
* Results. The value goes through ``JSON.stringify`` in the engine and ``json.loads`` here:
  ``undefined`` becomes None, NaN and Infinity become null, members that are functions are
  dropped; a function, symbol, BigInt or cyclic result is refused.
* Memo. A script's result is a function of its source and bindings alone (the points above), so
  each engine keeps the answers of small successful evaluations (source and bindings under
  ``MEMO_PAYLOAD_CHARS`` as JSON, up to ``MEMO_ENTRIES`` of them, emptied when full) and answers
  the same evaluation again from it, decoded afresh (a caller may mutate what it gets). A fresh
  context is most of an evaluation's cost, and a pipeline's SWITCH is evaluated once a
  workflow, so it showed in the roles process's profile under load
  (bench/results/archive/profiles/roles-saturated-gil.txt,
  bench/results/archive/cpu_split_script_memo.json). Failures are never kept: a time or memory
  limit depends on the machine's load, and the next try may pass.
* Breaches. A time or memory limit's reason comes from ``domain.scripts.breach`` (it ends with
  the evaluation's fingerprint), so replay answers it from the record (ADR 76).
* Failures. ``evaluate()`` never raises for a script's own failure; it returns ``ok=False`` with a
  stable one-line reason. It raises only for caller errors: bindings that are not JSON
  (``TypeError``/``ValueError`` from ``json.dumps``) or a non-string expression.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

import quickjs

from es_sched.domain.scripts import ScriptResult, breach

_MAX_STACK_BYTES: Final = 256 * 1024
MEMO_PAYLOAD_CHARS: Final = 4096
MEMO_ENTRIES: Final = 4096
_INPUT_GLOBAL: Final = "__es_sched_input"

# Runs once per fresh context. It reads and deletes the input global before the script starts and
# keeps `eval` and `JSON.stringify` in its closure, so a script cannot tamper with either. Calling
# `run(source)` through a local name is an indirect eval: the source runs as a global script, in
# sloppy mode as in Conductor, and its completion value is returned. The answer is a tagged string:
# "u" undefined, "j<json>" a value, "n<detail>" a result JSON cannot represent.
_RUNNER: Final = f"""(() => {{
  "use strict";
  const g = globalThis;
  const run = g.eval;
  const stringify = JSON.stringify;
  const [source, bindings] = JSON.parse(g.{_INPUT_GLOBAL});
  delete g.{_INPUT_GLOBAL};
  delete g.__date_clock;
  const refuse = (name) => function () {{
    throw new Error(name + " is not available: workflow scripts must be deterministic");
  }};
  Math.random = refuse("Math.random");
  const NoDate = refuse("Date");
  NoDate.now = NoDate.parse = NoDate.UTC = NoDate;
  g.Date = NoDate;
  // Conductor runs scripts in GraalJS, where input lists are Java lists: keep `list.get(i)`
  // and `list.size()` working on plain arrays (non-enumerable, so JSON results are unchanged).
  Object.defineProperty(Array.prototype, "get", {{ value: function (i) {{ return this[i]; }} }});
  Object.defineProperty(Array.prototype, "size", {{
    value: function () {{ return this.length; }},
  }});
  g.$ = bindings;
  const value = run(source);
  if (value === undefined) return "u";
  let text;
  try {{
    text = stringify(value);
  }} catch (e) {{
    if (e instanceof TypeError) return "n" + e.message;
    throw e;
  }}
  return text === undefined ? "ngot a " + typeof value : "j" + text;
}})()"""

_INTERRUPTED: Final = "InternalError: interrupted"
_OUT_OF_MEMORY: Final = "InternalError: out of memory"


class Memo:
    """The answers of small successful evaluations by payload (the module's "Memo"); plain
    dict operations, safe across threads (GIL)."""

    def __init__(self) -> None:
        self._kept: dict[str, str] = {}

    def __len__(self) -> int:
        return len(self._kept)

    def get(self, payload: str) -> str | None:
        return self._kept.get(payload)

    def keep(self, payload: str, answer: str) -> None:
        """Keep a successful evaluation's answer, if both are small; empty when full."""
        if len(payload) <= MEMO_PAYLOAD_CHARS and len(answer) <= MEMO_PAYLOAD_CHARS:
            if len(self._kept) >= MEMO_ENTRIES:
                self._kept.clear()
            self._kept[payload] = answer


def positive(**limits: float) -> None:
    """Refuse a limit that is not above zero, naming it."""
    for name, limit in limits.items():
        if limit <= 0:
            raise ValueError(f"{name} must be positive, got {limit}")


class QuickJsEngine:
    """A ``ScriptEngine`` that evaluates each script in a fresh, limited QuickJS context."""

    def __init__(
        self,
        time_limit_ms: int = 100,
        memory_limit_bytes: int = 32 * 1024 * 1024,
        max_result_bytes: int = 256 * 1024,
    ) -> None:
        positive(
            time_limit_ms=time_limit_ms,
            memory_limit_bytes=memory_limit_bytes,
            max_result_bytes=max_result_bytes,
        )
        self._time_limit_ms = time_limit_ms
        self._memory_limit_bytes = memory_limit_bytes
        self._max_result_bytes = max_result_bytes
        self._memo = Memo()  # payload -> the runner's answer

    def evaluate(self, expression: str, bindings: Mapping[str, Any]) -> ScriptResult:
        """Evaluate ``expression`` with ``$`` bound to ``bindings``; see the module docstring."""
        if not isinstance(expression, str):
            raise TypeError(f"expression must be a str, got {type(expression).__name__}")
        # ASCII-only JSON: lone surrogates and any other text survive the trip into the engine.
        payload = json.dumps([expression, dict(bindings)], allow_nan=False)
        known = self._memo.get(payload)
        if known is not None:
            return self._decode(known)
        context = quickjs.Context()
        context.set_memory_limit(self._memory_limit_bytes)
        context.set_time_limit(self._time_limit_ms / 1000)
        context.set_max_stack_size(_MAX_STACK_BYTES)
        try:
            context.set(_INPUT_GLOBAL, payload)
            outcome = context.eval(_RUNNER)
        except quickjs.JSException as exc:
            return ScriptResult(ok=False, error=self._reason(exc, expression, bindings))
        if not isinstance(outcome, str):
            raise RuntimeError(f"the QuickJS runner returned {type(outcome).__name__}, not str")
        result = self._decode(outcome)
        if result.ok:
            self._memo.keep(payload, outcome)
        return result

    def _decode(self, outcome: str) -> ScriptResult:
        tag, body = outcome[:1], outcome[1:]
        if tag == "u":
            return ScriptResult(ok=True, value=None)
        if tag == "n":
            return ScriptResult(ok=False, error=f"script result is not JSON-serializable: {body}")
        size = len(body.encode("utf-8", "surrogatepass"))
        if size > self._max_result_bytes:
            return ScriptResult(
                ok=False,
                error=f"script result is too large: {size} bytes, "
                f"the limit is {self._max_result_bytes} bytes",
            )
        return ScriptResult(ok=True, value=json.loads(body))

    def _reason(
        self, exc: quickjs.JSException, expression: str, bindings: Mapping[str, Any]
    ) -> str:
        lines = str(exc).splitlines()
        first = lines[0].strip() if lines else ""
        if first == _INTERRUPTED:
            limit = f"exceeded its time limit of {self._time_limit_ms} ms"
            return breach(limit, expression, bindings)
        if first == _OUT_OF_MEMORY:
            mib = self._memory_limit_bytes / (1024 * 1024)
            return breach(f"exceeded its memory limit of {mib:g} MiB", expression, bindings)
        return f"script error: {first or 'an exception without a message'}"
