"""Blocking librdkafka calls with a hard time limit.

A call such as ``send_offsets_to_transaction(..., timeout)`` is supposed to return within its
timeout, but librdkafka does not always keep that promise (issues #5456 and #5511: the group
coordinator leg waits without limit once the coordinator broker was lost). A thread stuck
inside C cannot be interrupted, so ``BoundedCaller`` runs one client's blocking calls on its own
daemon thread and gives up waiting after ``timeout + grace``: ``Wedged`` tells the caller to
abandon that client. The stuck thread keeps the client alive and ends with it, or with the
process (a daemon thread never delays exit).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field


class Wedged(Exception):
    """A call did not return within its limit; its client must not be used again."""


@dataclass
class _Result:
    done: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None


class BoundedCaller:
    """One client's blocking calls, on one daemon thread, each waited for at most its limit."""

    def __init__(self, name: str) -> None:
        self._jobs: queue.SimpleQueue[tuple[Callable[[], object], _Result] | None] = (
            queue.SimpleQueue()
        )
        threading.Thread(target=self._serve, name=name, daemon=True).start()

    def _serve(self) -> None:
        while (job := self._jobs.get()) is not None:
            fn, result = job
            try:
                fn()
            except BaseException as exc:  # noqa: BLE001 - re-raised in the waiting thread
                result.error = exc
            result.done.set()

    def call(self, fn: Callable[[float], object], timeout_s: float, grace_s: float) -> None:
        """``fn(timeout_s)`` on the thread; its exception re-raised here; ``Wedged`` when it has
        not returned after ``timeout_s + grace_s``."""
        result = _Result()
        self._jobs.put((lambda: fn(timeout_s), result))
        if not result.done.wait(timeout_s + grace_s):
            raise Wedged
        if result.error is not None:
            raise result.error

    def retire(self, finish: Callable[[], object]) -> None:
        """Run ``finish`` (close the client) on the thread after whatever it is doing, then end
        the thread: a close that blocks, or a call that never returns, blocks only this
        daemon thread."""
        self._jobs.put((finish, _Result()))
        self._jobs.put(None)
