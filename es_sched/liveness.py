"""Worker liveness: how alive a worker is, from when it was last heard from and the time now.

The one rule, used by the dispatcher (``dispatch.core.placement.Fleet``: only an alive worker
gets new leases, a dead one's leases are reclaimed) and by the read side (``GET
/api/v1/workers`` and the console's fleet page), so an operator is shown what the dispatcher
acts on.

- ``heard_at(sent_at, now, dead_after_s)``: when a worker's status report counts as heard from:
  when it is read (``now``), unless it was sent more than ``dead_after_s`` ago (a compacted
  report read at start-up, of a worker that may be gone), then when it was sent. The read side
  passes 0: a report counts from when it was sent.
- ``Liveness(suspect_after_s, dead_after_s).health(last_heard, now)``: ``alive`` while silent
  for less than ``suspect_after_s`` (``ES_SCHED_DISPATCH_SUSPECT_AFTER_S``), ``suspect`` until
  ``dead_after_s`` (``ES_SCHED_DISPATCH_DEAD_AFTER_S``), then ``dead``; a worker never heard
  from is dead.

Pure: the standard library only, and no clock (``now`` is passed in); the import-linter contract
of the pure cores holds this module to it.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Literal

Health = Literal["alive", "suspect", "dead"]


def heard_at(sent_at: datetime | None, now: datetime, dead_after_s: float) -> datetime:
    """When a report sent at ``sent_at`` (None: it does not say) and read ``now`` was heard."""
    if sent_at is not None and now - sent_at > timedelta(seconds=dead_after_s):
        return sent_at
    return now


class Liveness:
    """The silences after which a worker is suspect, then dead."""

    def __init__(self, suspect_after_s: float = 15.0, dead_after_s: float = 60.0) -> None:
        self.suspect_after = timedelta(seconds=suspect_after_s)
        self.dead_after = timedelta(seconds=dead_after_s)

    def health(self, last_heard: datetime | None, now: datetime) -> Health:
        if last_heard is None:
            return "dead"
        silence = now - last_heard
        if silence < self.suspect_after:
            return "alive"
        return "suspect" if silence < self.dead_after else "dead"
