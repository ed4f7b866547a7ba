"""Hostile scripts against ``ProcessSandbox`` (ADR 76): each one is stopped or finds nothing,
and the sandbox answers the next, ordinary script. The child process is real (it is this
package's own module); no service is involved."""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from es_sched.domain.scripts import ScriptResult, breach, recorded_breach
from es_sched.errors import ScriptSandboxUnavailable
from es_sched.scripting.sandbox import ProcessSandbox
from testkit.wait import wait_until

TIME = "exceeded its time limit of 100 ms"
MEMORY = "exceeded its memory limit of 32 MiB"
SPIN = "while (true) {}"
# Catastrophic backtracking: QuickJS's regular-expression matcher never polls its interrupt.
REDOS = "/(a+)+$/.test('a'.repeat(40) + 'b')"
# What ECMAScript itself defines on the global object (plus QuickJS's InternalError and the
# runner's `$`): no `require`, `process`, `std`, `os`, `print`, `scriptArgs`, timers or I/O.
BUILT_INS = {
    "Object",
    "Function",
    "Error",
    "EvalError",
    "RangeError",
    "ReferenceError",
    "SyntaxError",
    "TypeError",
    "URIError",
    "InternalError",
    "AggregateError",
    "Array",
    "parseInt",
    "parseFloat",
    "isNaN",
    "isFinite",
    "decodeURI",
    "decodeURIComponent",
    "encodeURI",
    "encodeURIComponent",
    "escape",
    "unescape",
    "Infinity",
    "NaN",
    "undefined",
    "Number",
    "Boolean",
    "String",
    "Math",
    "Reflect",
    "Symbol",
    "eval",
    "globalThis",
    "Date",
    "RegExp",
    "JSON",
    "Proxy",
    "Map",
    "Set",
    "WeakMap",
    "WeakSet",
    "ArrayBuffer",
    "SharedArrayBuffer",
    "Uint8ClampedArray",
    "Int8Array",
    "Uint8Array",
    "Int16Array",
    "Uint16Array",
    "Int32Array",
    "Uint32Array",
    "BigInt64Array",
    "BigUint64Array",
    "Float32Array",
    "Float64Array",
    "DataView",
    "Atomics",
    "Promise",
    "BigInt",
    "$",
}


@pytest.fixture(scope="module")
def sandbox() -> Iterator[ProcessSandbox]:
    engine = ProcessSandbox(grace_s=3.0)  # room for a loaded host; the ReDoS case waits it out
    yield engine
    engine.close()


def still_answers(sandbox: ProcessSandbox) -> None:
    assert sandbox.evaluate("$.n + 1", {"n": 41}) == ScriptResult(ok=True, value=42)


@pytest.mark.parametrize(
    ("script", "limit"),
    [
        pytest.param("while (true) {}", TIME, id="infinite-loop"),
        pytest.param("try { while (true) {} } catch (e) { 'caught' }", TIME, id="caught-loop"),
        pytest.param("({ toJSON() { for (;;) {} } })", TIME, id="loop-in-toJSON"),
        pytest.param("new Array(1024 * 1024 * 1024).fill(1).length", MEMORY, id="1GB-array"),
        pytest.param("new ArrayBuffer(1024 * 1024 * 1024).byteLength", MEMORY, id="1GB-buffer"),
        pytest.param("let s = 'x'; while (true) { s += s; }", MEMORY, id="doubling-string"),
    ],
)
def test_a_runaway_fails_with_its_limit(sandbox: ProcessSandbox, script: str, limit: str) -> None:
    assert sandbox.evaluate(script, {}) == ScriptResult(ok=False, error=breach(limit, script, {}))
    still_answers(sandbox)


def test_a_backtracking_regex_the_interrupt_misses_is_killed(sandbox: ProcessSandbox) -> None:
    before, child = sandbox.kills, sandbox._child
    result = sandbox.evaluate(REDOS, {"why": "redos"})
    assert result == ScriptResult(ok=False, error=breach(TIME, REDOS, {"why": "redos"}))
    assert sandbox.kills == before + 1  # the wall-time deadline fired, not QuickJS's interrupt
    still_answers(sandbox)
    assert sandbox._child is not child  # a fresh child took over


def test_a_child_that_dies_mid_script_fails_that_script_and_is_replaced() -> None:
    sandbox = ProcessSandbox(time_limit_ms=30_000)
    still_answers(sandbox)
    child = sandbox._child
    assert child is not None
    spent = cpu_ticks(child.pid)
    answers: list[ScriptResult] = []
    running = threading.Thread(target=lambda: answers.append(sandbox.evaluate(SPIN, {})))
    running.start()
    wait_until(lambda: cpu_ticks(child.pid) > spent + 5, 10, "the child running the script")
    child.kill()  # stands for any death of the child (a QuickJS crash, the OOM killer)
    running.join(10)
    reason = breach("stopped its sandbox process (exit status -9)", SPIN, {})
    assert answers == [ScriptResult(ok=False, error=reason)]
    still_answers(sandbox)
    sandbox.close()


def cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime (proc(5), from the state on)


@pytest.mark.parametrize(
    "name", ["require", "process", "std", "os", "print", "scriptArgs", "setTimeout", "fetch"]
)
def test_host_globals_do_not_exist(sandbox: ProcessSandbox, name: str) -> None:
    assert sandbox.evaluate(f"typeof {name}", {}) == ScriptResult(ok=True, value="undefined")
    # nor behind the Function constructor (a script's usual way out of a sandboxed scope)
    found = sandbox.evaluate(f"(function(){{}}).constructor('return typeof {name}')()", {})
    assert found == ScriptResult(ok=True, value="undefined")


def test_the_global_object_holds_only_ecmascript(sandbox: ProcessSandbox) -> None:
    names = sandbox.evaluate("Object.getOwnPropertyNames(globalThis)", {})
    assert names.ok and set(names.value) == BUILT_INS
    # the prototype chain's way to the global object finds the same object
    same = "({}).__proto__.constructor.constructor('return this')() === globalThis"
    assert sandbox.evaluate(same, {}) == ScriptResult(ok=True, value=True)


def test_modules_and_jobs_never_run(sandbox: ProcessSandbox) -> None:
    # No module loader and no job loop: import() never loads a file, a then() never runs.
    script = "let seen = 'nothing'; import('/etc/passwd').then((m) => { seen = m; }); seen"
    assert sandbox.evaluate(script, {}) == ScriptResult(ok=True, value="nothing")
    late = "Promise.resolve().then(() => { for (;;) {} }); 'done'"
    assert sandbox.evaluate(late, {}) == ScriptResult(ok=True, value="done")
    static = sandbox.evaluate("import fs from 'fs'; 1", {})
    assert not static.ok and static.error is not None
    assert static.error.startswith("script error: SyntaxError")


def test_prototype_tricks_do_not_outlive_their_script(sandbox: ProcessSandbox) -> None:
    polluted = "Object.prototype.admin = true; Array.prototype.map = null; JSON.parse = null; 1"
    assert sandbox.evaluate(polluted, {}) == ScriptResult(ok=True, value=1)
    after = "[({}).admin, typeof [].map, typeof JSON.parse]"
    assert sandbox.evaluate(after, {}) == ScriptResult(
        ok=True, value=[None, "function", "function"]
    )
    # the runner keeps its own JSON.stringify: a script cannot forge how its result is read
    forged = "JSON.stringify = () => '\"forged\"'; 'real'"
    assert sandbox.evaluate(forged, {}) == ScriptResult(ok=True, value="real")


def test_the_child_holds_no_way_to_files_or_processes(sandbox: ProcessSandbox) -> None:
    still_answers(sandbox)
    assert sandbox._child is not None
    limits = Path(f"/proc/{sandbox._child.pid}/limits").read_text()
    rows = {line[:26].strip(): line[26:].split()[:2] for line in limits.splitlines()[1:]}
    assert rows["Max file size"] == ["0", "0"]
    assert rows["Max processes"] == ["0", "0"]
    assert rows["Max core file size"] == ["0", "0"]
    open_now = len(os.listdir(f"/proc/{sandbox._child.pid}/fd"))
    assert int(rows["Max open files"][0]) <= open_now + 1


def test_the_childs_environment_holds_no_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ES_SCHED_PG_URL", "postgresql://u:hunter2@db/es")
    monkeypatch.setenv("PGPASSWORD", "hunter2")
    sandbox = ProcessSandbox()
    still_answers(sandbox)
    assert sandbox._child is not None
    environ = Path(f"/proc/{sandbox._child.pid}/environ").read_bytes()
    sandbox.close()
    names = {entry.split(b"=", 1)[0].decode() for entry in environ.split(b"\0") if entry}
    assert b"hunter2" not in environ
    assert names <= {
        "PATH",
        "PYTHONPATH",
        "PYTHONHASHSEED",
        "LANG",
        "LC_ALL",
        "LC_CTYPE",
        "ES_SCHED_CORE",
    }


def test_a_thrown_message_cannot_pass_for_a_breach(sandbox: ProcessSandbox) -> None:
    fake = breach(TIME, "1", {})
    result = sandbox.evaluate(f"throw new Error({fake!r})", {})
    assert result.error == f"script error: Error: {fake}"
    assert recorded_breach(result.error) is None
    assert recorded_breach(f"switch evaluation failed: {fake}") == (fake[-17:-1], fake)


def test_bindings_that_are_not_json_are_the_callers_error(sandbox: ProcessSandbox) -> None:
    with pytest.raises(TypeError):
        sandbox.evaluate("$", {"x": object()})
    still_answers(sandbox)


def test_a_child_that_cannot_start_is_the_hosts_fault() -> None:
    sandbox = ProcessSandbox()
    sandbox._argv = [sys.executable, "-c", "raise SystemExit(3)"]  # stands for a fork that fails
    with pytest.raises(ScriptSandboxUnavailable, match="exit status 3"):
        sandbox.evaluate("1", {})


def test_a_child_that_died_idle_costs_no_script_anything(
    sandbox: ProcessSandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    still_answers(sandbox)
    child = sandbox._child
    assert child is not None
    child.kill()  # between two scripts,
    child.wait()
    monkeypatch.setattr(child, "poll", lambda: None)  # and not seen yet when the next is sent
    assert sandbox.evaluate("$.n * 2", {"n": 21}) == ScriptResult(ok=True, value=42)
    assert sandbox._child is not child


def test_a_repeat_is_answered_without_the_child(sandbox: ProcessSandbox) -> None:
    first = sandbox.evaluate("({n: $.n})", {"n": 7})
    child = sandbox._child
    assert child is not None
    child.kill()  # a repeat must not need it
    child.wait()
    again = sandbox.evaluate("({n: $.n})", {"n": 7})
    assert again == first == ScriptResult(ok=True, value={"n": 7})
    assert again.value is not first.value  # decoded afresh: a caller may mutate what it gets
    assert sandbox._child is child  # no round trip, so no new child either
    failed = sandbox.evaluate("throw 1", {})  # failures are never kept: the next try may pass
    assert not failed.ok and sandbox._child is not child
