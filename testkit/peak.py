"""``Peak``: how much work ran at once, measured from inside the work (handlers of a worker)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager


class Peak:
    """``with peak.held(amount):`` around a piece of work; ``peak.max`` is the most held at
    once. Safe across threads and inside coroutines (nothing in it awaits)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.now = self.max = 0.0

    @contextmanager
    def held(self, amount: float = 1.0) -> Iterator[None]:
        with self._lock:
            self.now += amount
            self.max = max(self.max, self.now)
        try:
            yield
        finally:
            with self._lock:
                self.now -= amount
