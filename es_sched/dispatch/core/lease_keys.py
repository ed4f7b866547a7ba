"""Which lease key the dispatcher seals each worker's tokens to (ADR 74), and when a worker's
key may change; pure: keys are the published text, times are passed in.

A worker process makes a key at start and publishes it in every status. Workers of a pool
share their credentials, so any of them can publish a status, or a tombstone, under another's
id. The book therefore believes a new key for a worker (a restart) only once the key it holds
has been silent ``silence_s`` (a few heartbeats); a report with another key while the held one
is live is ``CONTESTED``: ignored, the tokens stay sealed to the live key. A key outlives its
worker's tombstone and is forgotten only once silent past the dead worker's silence
(``silent``), or when its worker is declared dead.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum


class Heard(Enum):
    NEW = "new"  # a worker not known: its key is taken
    SAME = "same"  # the key held
    CHANGED = "changed"  # a new key after the held one fell silent: a restart
    CONTESTED = "contested"  # another key while the held one is live: ignored


@dataclass
class LeaseKeys:
    silence_s: float  # how long a key must be silent before another is believed
    keys: dict[str, str] = field(default_factory=dict)  # worker id -> key ("": none)
    heard: dict[str, datetime] = field(default_factory=dict)  # worker id -> key last heard

    def hear(self, worker_id: str, key: str, at: datetime) -> Heard:
        """A report of ``worker_id`` with ``key`` (``""``: none) sent ``at``; the key is held
        unless the answer is ``CONTESTED``."""
        held = self.keys.get(worker_id)
        if held is None:
            verdict = Heard.NEW
        elif held == key:
            verdict = Heard.SAME
        elif (at - self.heard[worker_id]).total_seconds() < self.silence_s:
            return Heard.CONTESTED
        else:
            verdict = Heard.CHANGED
        self.keys[worker_id] = key
        self.heard[worker_id] = max(at, self.heard.get(worker_id, at))
        return verdict

    def forget(self, worker_id: str) -> str | None:
        """Drop the worker's key (it is dead, or has no key to hold); the key it had."""
        self.heard.pop(worker_id, None)
        return self.keys.pop(worker_id, None)

    def silent(self, now: datetime, limit_s: float) -> list[str]:
        """The workers whose key was last heard over ``limit_s`` before ``now``."""
        return [w for w, at in self.heard.items() if (now - at).total_seconds() > limit_s]
