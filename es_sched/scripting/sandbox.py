"""Workflow scripts in a child process the engine can kill: ``ProcessSandbox`` (ADR 76).

QuickJS stops a script at its time limit only where its interpreter polls the interrupt
handler, and its regular-expression matcher never does: ``/(a+)+$/.test("a".repeat(40) + "b")``
backtracks for hours past any limit, holding the calling thread (and, through the GIL, the
whole decider, whose Kafka session then expires on every decider that takes the input in
turn). A script therefore runs in a child process, ``python -m es_sched.scripting.sandbox``,
which evaluates with ``QuickJsEngine`` (its CPU limit, heap limit, result cap and memo) and
answers over a pipe. The parent waits at most the time limit plus ``grace_s`` of wall time; a
child that has not answered by then is killed and replaced, and the evaluation fails with the
time limit's breach reason (``domain.scripts.breach``: replay answers it from the record).

Protocol: one line of JSON ``[expression, bindings]`` in, one line ``{"ok", "value",
"error"}`` out, in order. Successful small evaluations are also kept here (``quickjs.Memo``,
the same rule as the engine's), so a repeated one is answered without crossing the pipe. One
child per engine, one evaluation at a time (a lock): a decider decides on one thread.

The child also drops what it never needs before reading its first script, so a flaw in QuickJS
that let a script reach native code would still find no way out: an environment of only what
locates Python and es_sched (no credentials), no new files or sockets
(``RLIMIT_NOFILE`` at the descriptors it holds), no file writes (``RLIMIT_FSIZE`` 0), no
processes (``RLIMIT_NPROC`` 0), no core dumps.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import select
import subprocess
import sys
import threading
import weakref
from collections.abc import Mapping
from typing import Any, Final

from es_sched.domain.scripts import ScriptResult, breach, fingerprint
from es_sched.errors import ScriptSandboxUnavailable
from es_sched.scripting.quickjs import Memo, QuickJsEngine, positive

log = logging.getLogger(__name__)
_READ_CHUNK: Final = 1 << 16
_ENDED: Final = b"\x00ended"  # not a line the child writes (its lines are JSON)
_SILENT: Final = b"\x00silent"
_READY: Final = b"ready"
# All the child's environment: where Python finds es_sched and which core it loads. Nothing
# else (credentials in ES_SCHED_* or PG* variables) is in its memory for a script to find.
_CHILD_ENV: Final = frozenset(
    {"PATH", "PYTHONPATH", "PYTHONHASHSEED", "LANG", "LC_ALL", "LC_CTYPE", "ES_SCHED_CORE"}
)
_START_S: Final = 30.0


class ProcessSandbox:
    """A ``ScriptEngine`` that evaluates in a killable child process (see the module)."""

    def __init__(
        self,
        time_limit_ms: int = 100,
        memory_limit_bytes: int = 32 * 1024 * 1024,
        max_result_bytes: int = 256 * 1024,
        grace_s: float = 2.0,
    ) -> None:
        # checked here too: a child that cannot start would fail every script instead
        positive(
            time_limit_ms=time_limit_ms,
            memory_limit_bytes=memory_limit_bytes,
            max_result_bytes=max_result_bytes,
            grace_s=grace_s,
        )
        self._time_limit_ms = time_limit_ms
        self._deadline_s = time_limit_ms / 1000 + grace_s
        self._argv = [
            sys.executable,
            "-m",
            "es_sched.scripting.sandbox",
            str(time_limit_ms),
            str(memory_limit_bytes),
            str(max_result_bytes),
        ]
        self._child: subprocess.Popen[bytes] | None = None
        self._pending = b""
        self._lock = threading.Lock()
        self._memo = Memo()  # the child's memo too, but a repeat here costs no round trip
        self.kills = 0  # children killed at the wall-time deadline (tests and metrics read it)

    def evaluate(self, expression: str, bindings: Mapping[str, Any]) -> ScriptResult:
        if not isinstance(expression, str):
            raise TypeError(f"expression must be a str, got {type(expression).__name__}")
        # ASCII-only JSON, one line: the caller's error (bindings that are not JSON) raises here.
        payload = json.dumps([expression, dict(bindings)], allow_nan=False)
        known = self._memo.get(payload)
        if known is not None:  # a repeat never crosses the pipe; decoded afresh
            return _result(known)
        line = payload.encode() + b"\n"
        with self._lock:
            child = self._child if self._child and self._child.poll() is None else self._start()
            if not self._send(child, line):  # it ended before this script reached it
                self._stop(child)
                child = self._start()
                if not self._send(child, line):
                    raise ScriptSandboxUnavailable("a fresh script sandbox process ended at once")
            answer = self._read_line(child, self._deadline_s)
            if answer in (_ENDED, _SILENT):
                reason = self._lost(child, answer is _SILENT, expression, bindings)
                return ScriptResult(ok=False, error=reason)
        result = _result(text := answer.decode())
        if result.ok:
            self._memo.keep(payload, text)
        return result

    def close(self) -> None:
        with self._lock:
            if self._child is not None:
                self._stop(self._child)
                self._child = None

    def _start(self) -> subprocess.Popen[bytes]:
        child = subprocess.Popen(
            self._argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            close_fds=True,
            env={k: v for k, v in os.environ.items() if k in _CHILD_ENV},
        )
        self._pending = b""
        # Starting Python is not the script's time: wait for the child's word before any.
        ready = self._read_line(child, _START_S)
        if ready != _READY:
            self._stop(child)
            raise ScriptSandboxUnavailable(
                f"the script sandbox process did not start within {_START_S:g} s "
                f"(exit status {child.returncode})"
            )
        self._child = child
        weakref.finalize(self, self._stop, child)  # an engine dropped unclosed ends its child
        return child

    @staticmethod
    def _send(child: subprocess.Popen[bytes], line: bytes) -> bool:
        assert child.stdin is not None
        try:
            child.stdin.write(line)
            child.stdin.flush()
        except BrokenPipeError:
            return False
        return True

    def _read_line(self, child: subprocess.Popen[bytes], deadline_s: float) -> bytes:
        """The child's next line, ``_ENDED`` (its end of the pipe closed) or ``_SILENT`` (no
        answer by the wall-time deadline)."""
        assert child.stdout is not None
        fd = child.stdout.fileno()
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        timeout_ms = int(deadline_s * 1000)
        while b"\n" not in self._pending:
            if not poller.poll(timeout_ms):
                return _SILENT
            chunk = os.read(fd, _READ_CHUNK)
            if not chunk:
                return _ENDED
            self._pending += chunk
        line, self._pending = self._pending.split(b"\n", 1)
        return line

    def _lost(
        self, child: subprocess.Popen[bytes], silent: bool, expression: str, bindings: Any
    ) -> str:
        self._stop(child)
        self._child = None
        if silent:  # alive but mute past the deadline: a runaway the interrupt missed
            self.kills += 1
            log.warning(
                "killed the script sandbox process %d: no answer within %g s (script %s)",
                child.pid,
                self._deadline_s,
                fingerprint(expression, bindings),
            )
            limit = f"exceeded its time limit of {self._time_limit_ms} ms"
            return breach(limit, expression, bindings)
        status = child.returncode
        return breach(f"stopped its sandbox process (exit status {status})", expression, bindings)

    @staticmethod
    def _stop(child: subprocess.Popen[bytes]) -> None:
        if child.poll() is None:
            child.kill()
        child.wait()
        for stream in (child.stdin, child.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):  # a line it never read: gone with it
                    stream.close()


def _result(answer: str) -> ScriptResult:
    found = json.loads(answer)
    return ScriptResult(ok=bool(found["ok"]), value=found["value"], error=found["error"])


def _drop_privileges() -> None:
    """What the child never needs again once QuickJS is loaded (see the module)."""
    import resource  # noqa: PLC0415 (POSIX only, and only the child needs it)

    open_fds = len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else 3
    for limit, value in (
        (resource.RLIMIT_NOFILE, open_fds),
        (resource.RLIMIT_FSIZE, 0),
        (resource.RLIMIT_NPROC, 0),
        (resource.RLIMIT_CORE, 0),
    ):
        resource.setrlimit(limit, (value, value))


def _serve(time_limit_ms: int, memory_limit_bytes: int, max_result_bytes: int) -> None:
    engine = QuickJsEngine(time_limit_ms, memory_limit_bytes, max_result_bytes)
    _drop_privileges()
    source, sink = sys.stdin.buffer, sys.stdout.buffer
    sink.write(_READY + b"\n")
    sink.flush()
    for line in source:
        expression, bindings = json.loads(line)
        result = engine.evaluate(expression, bindings)
        answer = {"ok": result.ok, "value": result.value, "error": result.error}
        sink.write(json.dumps(answer, allow_nan=False).encode() + b"\n")
        sink.flush()


if __name__ == "__main__":
    _serve(*(int(arg) for arg in sys.argv[1:4]))
