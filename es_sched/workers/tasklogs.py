"""A task attempt's log lines and a failed handler's traceback, bounded (ADR 60).

Both travel with the attempt's outcome (``worker.task_completed`` / ``worker.task_failed``),
so the decider copies them onto ``task.completed`` / ``task.failed`` and the read model's event
archive keeps them; nothing is sent while the task runs. The bounds are settings
(``ES_SCHED_WORKER_LOG_MAX_CHARS``, ``ES_SCHED_WORKER_TRACEBACK_MAX_CHARS``) applied here, by
every writer: the worker SDK (``TaskContext.log``) and the HTTP gateway (a Conductor worker's
``TaskResult`` logs and ``POST /api/tasks/{taskId}/log``).

- ``line(text, at)``: one line as the records carry it, ``{"at": ISO time, "log": text}``.
- ``bounded(lines, max_chars)``: the newest lines whose text fits, oldest first; when some
  were dropped, a first line says how many (the end of a log says most about how it ended).
- ``TaskLog``: the SDK's buffer behind ``ctx.log``, bounded as lines come (thread safe: a
  handler may log from threads of its own).
- ``traceback_of(exc, max_chars)``: the exception's traceback, its last ``max_chars``
  characters (the innermost frames and the exception itself).
"""

from __future__ import annotations

import threading
import traceback
from collections import deque
from datetime import UTC, datetime
from typing import Any

JSON = dict[str, Any]
CUT = "\u2026"  # marks where a line or traceback was cut


def line(text: str, at: datetime | None = None) -> JSON:
    """NUL becomes U+FFFD: PostgreSQL's text and jsonb hold no NUL, and the read model's
    archive keeps the line."""
    when = (at or datetime.now(UTC)).astimezone(UTC)
    return {"at": when.isoformat().replace("+00:00", "Z"), "log": text.replace("\x00", "\ufffd")}


def cut(text: str, max_chars: int) -> str:
    return text if len(text) <= max_chars else text[: max_chars - 1] + CUT


def dropped_line(count: int, max_chars: int, at: str) -> JSON:
    return {
        "at": at,
        "log": f"[{count} earlier line{'s' if count != 1 else ''} dropped: over "
        f"{max_chars} characters (ES_SCHED_WORKER_LOG_MAX_CHARS)]",
    }


def bounded(lines: list[JSON], max_chars: int) -> list[JSON]:
    """The newest ``lines`` whose text fits in ``max_chars`` (a line longer than that alone is
    cut), oldest first, after a line naming how many were dropped."""
    kept: list[JSON] = []
    used = 0
    for entry in reversed(lines):
        text = cut(str(entry.get("log", "")), max_chars)
        if kept and used + len(text) > max_chars:
            break
        kept.append({**entry, "log": text})
        used += len(text)
    kept.reverse()
    if len(kept) < len(lines):
        kept.insert(0, dropped_line(len(lines) - len(kept), max_chars, kept[0]["at"]))
    return kept


class TaskLog:
    """Lines logged by one task attempt, the newest ``max_chars`` of them kept."""

    def __init__(self, max_chars: int) -> None:
        self.max_chars = max_chars
        self._lines: deque[JSON] = deque()
        self._chars = 0
        self._dropped = 0
        self._lock = threading.Lock()

    def add(self, text: str) -> None:
        entry = line(cut(str(text), self.max_chars))
        with self._lock:
            self._lines.append(entry)
            self._chars += len(entry["log"])
            while self._chars > self.max_chars and len(self._lines) > 1:
                self._chars -= len(self._lines.popleft()["log"])
                self._dropped += 1

    def lines(self) -> list[JSON]:
        with self._lock:
            kept = list(self._lines)
            dropped = self._dropped
        if dropped and kept:
            kept.insert(0, dropped_line(dropped, self.max_chars, kept[0]["at"]))
        return kept


def traceback_of(exc: BaseException, max_chars: int) -> str:
    text = "".join(traceback.format_exception(exc)).replace("\x00", "\ufffd")
    if len(text) <= max_chars:
        return text
    return CUT + text[len(text) - max_chars + 1 :]
