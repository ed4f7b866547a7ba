from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from es_sched.domain.scripts import ScriptEngine, ScriptResult, breach
from es_sched.scripting.quickjs import QuickJsEngine

DETERMINISM = "is not available: workflow scripts must be deterministic"


@pytest.fixture(scope="module")
def engine() -> ScriptEngine:
    return QuickJsEngine()


def ok(value: Any) -> ScriptResult:
    return ScriptResult(ok=True, value=value)


def test_iife(engine: ScriptEngine) -> None:
    result = engine.evaluate("(function(){ return $.a + $.b; })()", {"a": 2, "b": 3})
    assert result == ok(5)


def test_statement_list_yields_its_completion_value(engine: ScriptEngine) -> None:
    script = "if ($.x > 1) { 'big'; } else { 'small'; }"
    assert engine.evaluate(script, {"x": 2}) == ok("big")
    assert engine.evaluate(script, {"x": 0}) == ok("small")
    assert engine.evaluate(
        "var total = 0; for (const n of $.ns) { total += n; } total", {"ns": [1, 2, 3]}
    ) == ok(6)


def test_plain_expression(engine: ScriptEngine) -> None:
    assert engine.evaluate("$.value * 2", {"value": 21}) == ok(42)
    assert engine.evaluate("$.value / 4", {"value": 1}) == ok(0.25)
    assert engine.evaluate("$.kind == 'video' ? 'transcode' : 'skip'", {"kind": "video"}) == ok(
        "transcode"
    )


def test_nested_object_and_array_results(engine: ScriptEngine) -> None:
    script = "(function(){ return {jobs: $.ids.map((id) => ({id, done: false})), n: null}; })()"
    assert engine.evaluate(script, {"ids": ["a", "b"]}) == ok(
        {"jobs": [{"id": "a", "done": False}, {"id": "b", "done": False}], "n": None}
    )
    assert engine.evaluate("[1, [2, [3, {}]], 'x']", {}) == ok([1, [2, [3, {}]], "x"])


def test_unicode_and_nested_bindings_round_trip(engine: ScriptEngine) -> None:
    bindings = {
        "title": "Amélie ☃ 日本語 😀",
        "tracks": [{"lang": "ελληνικά", "codecs": ["h264", "aac"]}, {"lang": None}],
        "meta": {"deep": {"deeper": {"flag": True, "ratio": 1.5}}},
    }
    assert engine.evaluate("$", bindings) == ok(bindings)
    assert engine.evaluate("$.title.length", bindings) == ok(len("Amélie ☃ 日本語 ") + 2)
    assert engine.evaluate("$.tracks[0].codecs[1]", bindings) == ok("aac")


def test_undefined_and_null_become_none(engine: ScriptEngine) -> None:
    assert engine.evaluate("undefined", {}) == ok(None)
    assert engine.evaluate("$.missing", {}) == ok(None)
    assert engine.evaluate("(function(){})()", {}) == ok(None)
    assert engine.evaluate("null", {}) == ok(None)


def test_infinite_loop_hits_the_time_limit_and_the_engine_recovers() -> None:
    engine = QuickJsEngine(time_limit_ms=50)
    result = engine.evaluate("while (true) {}", {})
    limit = "exceeded its time limit of 50 ms"
    assert result == ScriptResult(ok=False, error=breach(limit, "while (true) {}", {}))
    # the interrupt cannot be caught by the script either
    script = "try { while (true) {} } catch (e) { 'caught' }"
    assert engine.evaluate(script, {}).error == breach(limit, script, {})
    assert engine.evaluate("$.n + 1", {"n": 1}) == ok(2)


def test_allocation_bomb_hits_the_memory_limit() -> None:
    engine = QuickJsEngine(time_limit_ms=5_000, memory_limit_bytes=8 * 1024 * 1024)
    limit = "exceeded its memory limit of 8 MiB"
    for bomb in (
        "let s = 'x'; while (true) { s += s; }",
        "const a = []; while (true) { a.push(new Array(100000).fill(1)); }",
    ):
        assert engine.evaluate(bomb, {}) == ScriptResult(ok=False, error=breach(limit, bomb, {}))
    assert engine.evaluate("'still fine'", {}) == ok("still fine")


def test_bindings_larger_than_the_memory_limit_are_refused() -> None:
    engine = QuickJsEngine(memory_limit_bytes=1024 * 1024)
    bindings = {"blob": "x" * (4 * 1024 * 1024)}
    result = engine.evaluate("$.blob.length", bindings)
    reason = breach("exceeded its memory limit of 1 MiB", "$.blob.length", bindings)
    assert result == ScriptResult(ok=False, error=reason)


def test_syntax_error_reason(engine: ScriptEngine) -> None:
    result = engine.evaluate("if ($.x > {", {})
    assert not result.ok
    assert result.error is not None
    assert result.error.startswith("script error: SyntaxError: ")
    assert "\n" not in result.error


def test_reference_error_reason(engine: ScriptEngine) -> None:
    result = engine.evaluate("foo + 1", {})
    assert result == ScriptResult(
        ok=False, error="script error: ReferenceError: 'foo' is not defined"
    )


def test_thrown_errors_keep_only_their_first_line(engine: ScriptEngine) -> None:
    result = engine.evaluate("throw new TypeError('first line\\nsecond line')", {})
    assert result == ScriptResult(ok=False, error="script error: TypeError: first line")
    assert engine.evaluate("throw 'plain'", {}).error == "script error: plain"
    overflow = engine.evaluate("function f() { return f(); } f()", {})
    assert overflow.error == "script error: InternalError: stack overflow"


@pytest.mark.parametrize(
    ("script", "what"),
    [
        ("Math.random()", "Math.random"),
        ("(function(){ return Math.floor(Math.random() * 10); })()", "Math.random"),
        ("Date.now()", "Date"),
        ("new Date()", "Date"),
        ("new Date(2024, 0, 1).getTime()", "Date"),
        ("Date()", "Date"),
    ],
)
def test_nondeterminism_is_refused(engine: ScriptEngine, script: str, what: str) -> None:
    result = engine.evaluate(script, {})
    assert result == ScriptResult(ok=False, error=f"script error: Error: {what} {DETERMINISM}")


def test_no_hidden_clock_and_no_state_between_evaluations(engine: ScriptEngine) -> None:
    assert engine.evaluate("typeof __date_clock", {}) == ok("undefined")
    assert engine.evaluate("globalThis.leak = 1; Object.prototype.polluted = 2; 0", {}) == ok(0)
    assert engine.evaluate("[typeof leak, ({}).polluted]", {}) == ok(["undefined", None])


def test_huge_result_is_refused() -> None:
    engine = QuickJsEngine(max_result_bytes=1024)
    assert engine.evaluate("'x'.repeat(1000)", {}) == ok("x" * 1000)
    result = engine.evaluate("'x'.repeat(2000)", {})
    assert result == ScriptResult(
        ok=False, error="script result is too large: 2002 bytes, the limit is 1024 bytes"
    )
    default = QuickJsEngine().evaluate("'é'.repeat(200 * 1024)", {})
    assert not default.ok
    assert default.error is not None
    assert default.error.startswith("script result is too large: 409602 bytes")


@pytest.mark.parametrize(
    ("script", "detail"),
    [
        ("(function(){ return function () {}; })()", "got a function"),
        ("() => 1", "got a function"),
        ("Symbol('s')", "got a symbol"),
        ("(function(){ const a = {}; a.self = a; return a; })()", "circular reference"),
    ],
)
def test_non_json_results_are_refused(engine: ScriptEngine, script: str, detail: str) -> None:
    result = engine.evaluate(script, {})
    assert result == ScriptResult(
        ok=False, error=f"script result is not JSON-serializable: {detail}"
    )


def test_bindings_are_data_not_code(engine: ScriptEngine) -> None:
    sneaky = '"); while(true){} ("'
    assert engine.evaluate("$.s", {"s": sneaky}) == ok(sneaky)
    assert engine.evaluate("$.s + '!'", {"s": sneaky}) == ok(sneaky + "!")
    assert engine.evaluate("Object.keys($)", {sneaky: 1}) == ok([sneaky])
    backslashes = "\\\"'`${1+1}</script>\u2028\u2029\x00"
    assert engine.evaluate("$.s", {"s": backslashes}) == ok(backslashes)
    lone_surrogate = "a\ud800b"
    assert engine.evaluate("$.s", {"s": lone_surrogate}) == ok(lone_surrogate)


def test_caller_errors_raise() -> None:
    engine = QuickJsEngine()
    with pytest.raises(TypeError):
        engine.evaluate("$", {"x": object()})
    with pytest.raises(ValueError, match="JSON"):
        engine.evaluate("$", {"x": math.nan})
    with pytest.raises(ValueError, match="time_limit_ms"):
        QuickJsEngine(time_limit_ms=0)


JSON_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53), max_value=2**53)
    | st.floats(allow_nan=False, allow_infinity=False).filter(lambda x: not x.is_integer())
    | st.text(max_size=20)
)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=10), children, max_size=5)
    ),
    max_leaves=30,
)


def same_json(got: Any, want: Any) -> bool:
    """Equality that knows JSON numbers: an int must come back an int, a float a float."""
    if isinstance(want, bool) or want is None or isinstance(want, str):
        return type(got) is type(want) and got == want
    if isinstance(want, int):
        return type(got) is int and got == want
    if isinstance(want, float):
        return type(got) is float and got == want
    if isinstance(want, list):
        return (
            isinstance(got, list)
            and len(got) == len(want)
            and all(same_json(g, w) for g, w in zip(got, want, strict=True))
        )
    assert isinstance(want, dict)
    return (
        isinstance(got, dict)
        and got.keys() == want.keys()
        and all(same_json(got[k], want[k]) for k in want)
    )


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(max_size=10), JSON_VALUES, max_size=6))
def test_dollar_round_trips_json_values(bindings: dict[str, Any]) -> None:
    result = QuickJsEngine().evaluate("$", bindings)
    assert result.ok, result.error
    assert same_json(result.value, bindings)


class CountingContexts:
    """``quickjs.Context`` as the engine sees it, counting the contexts it makes."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import quickjs  # noqa: PLC0415

        self.made, real = 0, quickjs.Context

        def make() -> Any:
            self.made += 1
            return real()

        monkeypatch.setattr("es_sched.scripting.quickjs.quickjs.Context", make)


def test_the_same_evaluation_is_answered_from_the_memo_with_a_fresh_copy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    contexts, engine = CountingContexts(monkeypatch), QuickJsEngine()
    script = "({case: $.height >= 1080 ? '1080' : '720', seen: [$.height]})"
    first = engine.evaluate(script, {"height": 1080})
    assert first == ok({"case": "1080", "seen": [1080]}) and contexts.made == 1
    first.value["seen"].append("mutated by a caller")
    again = engine.evaluate(script, {"height": 1080})
    assert again == ok({"case": "1080", "seen": [1080]}) and contexts.made == 1
    # other bindings, or another engine (its own limits), evaluate for real
    assert engine.evaluate(script, {"height": 720}) == ok({"case": "720", "seen": [720]})
    assert QuickJsEngine().evaluate(script, {"height": 1080}) == ok(
        {"case": "1080", "seen": [1080]}
    )
    assert contexts.made == 3


def test_failures_are_never_answered_from_the_memo(monkeypatch: pytest.MonkeyPatch) -> None:
    contexts, engine = CountingContexts(monkeypatch), QuickJsEngine()
    for made in (1, 2):
        result = engine.evaluate("Math.random()", {})
        assert not result.ok and DETERMINISM in (result.error or "")
        assert contexts.made == made


def test_the_memo_is_bounded_and_skips_large_evaluations(monkeypatch: pytest.MonkeyPatch) -> None:
    from es_sched.scripting import quickjs as module  # noqa: PLC0415

    monkeypatch.setattr(module, "MEMO_ENTRIES", 3)
    contexts, engine = CountingContexts(monkeypatch), QuickJsEngine()
    for n in range(7):
        assert engine.evaluate("$.n + 1", {"n": n}) == ok(n + 1)
    assert len(engine._memo) <= 3
    big = {"blob": "x" * module.MEMO_PAYLOAD_CHARS}
    for made in (8, 9):
        assert engine.evaluate("$.blob.length", big) == ok(module.MEMO_PAYLOAD_CHARS)
        assert contexts.made == made
