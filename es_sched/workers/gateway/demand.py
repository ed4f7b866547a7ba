"""What HTTP workers asked one gateway for, and how long it waits for them to ask again.

Pure bookkeeping, no clock of its own (every call takes ``now``, monotonic seconds), so the
rules below are tested without a broker or sleeps (tests/unit/workers/test_gateway_demand.py).

- **Demand** (ADR 24 a): each poll or update-v2 for a task type records the ``count`` its
  HTTP worker asked for; the gateway's status announces the types asked for and room for the
  sum of those counts. update-v2's take of the next task (count 1) keeps a larger count the
  same worker asked for meanwhile (conductor-python's threads share one worker id).
- **Patience** (ADR 34): how long a type may go without a request here before the gateway
  stops announcing it and hands back the tasks leased for it that no poll took. It follows the
  requests this gateway sees: ``IDLE_GAPS`` times the smoothed gap between two requests for
  the type (an HTTP update of one of its tasks counts as a request for staying alive,
  ``busy``), at least ``MIN_PATIENCE_S``, at most ``window_s`` (``ES_SCHED_API_GATEWAY_DEMAND_S``,
  also the patience before a second request has shown a gap). A type with a long poll waiting
  on it is never idle. Why: behind several API processes (``--workers N``, or hosts behind a
  load balancer) an HTTP worker's connections, not its wishes, decide which gateway its
  requests reach. conductor-python polls on one pooled connection and updates on others, so
  with a fixed window a gateway its threads stopped updating through kept tasks for the whole
  window while the polls went elsewhere, and the last tasks of a run waited for it
  (``bench/api_workers.py`` with the SDK on several API processes).
"""

from __future__ import annotations

from dataclasses import dataclass, field

# At least this long: a worker's polls pause while it updates what it took, one by one, and
# longer on a loaded host; a shorter floor handed back tasks the worker would have polled a
# moment later (ADR 34, bench/api_workers.py).
MIN_PATIENCE_S = 1.0
IDLE_GAPS = 4.0  # gaps without a request before a type counts as no longer asked for here
SMOOTHING = 0.2  # weight of the newest gap in the moving average


@dataclass
class _Type:
    last: float  # the last request for the type
    gap: float | None = None  # smoothed seconds between requests; None before the second
    waiters: int = 0  # long polls waiting on it now


@dataclass
class Demand:
    window_s: float
    # (type, HTTP worker) -> (its last request, the count it asked for)
    wanted: dict[tuple[str, str], tuple[float, int]] = field(default_factory=dict)
    _types: dict[str, _Type] = field(default_factory=dict)

    def asked(
        self, task_type: str, worker: str, count: int, now: float, next_of_update: bool
    ) -> None:
        """A poll (or update-v2's take of the next task) for ``count`` tasks arrived."""
        seen = self._types.get(task_type)
        if seen is None:
            self._types[task_type] = _Type(now)
        else:
            gap = max(0.0, now - seen.last)
            seen.gap = gap if seen.gap is None else (1 - SMOOTHING) * seen.gap + SMOOTHING * gap
            seen.last = now
        before, want = self.wanted.get((task_type, worker)), count
        if next_of_update and before is not None and now - before[0] < self.window_s:
            want = max(count, before[1])
        self.wanted[task_type, worker] = (now, want)

    def busy(self, task_type: str, now: float) -> None:
        """An HTTP worker updated a task of a type asked for here: it is working on the type
        and will ask again, so the type is not idle. The average is not fed (an update is not
        a poll), but the next request's gap is counted from this update."""
        seen = self._types.get(task_type)
        if seen is not None:
            seen.last = max(seen.last, now)

    def waiting(self, task_type: str, now: float, on: bool) -> None:
        """A long poll on ``task_type`` starts (``on``) or ends waiting."""
        seen = self._types.setdefault(task_type, _Type(now))
        seen.waiters += 1 if on else -1
        if not on:
            seen.last = max(seen.last, now)  # asked for until the moment it stopped waiting

    def patience(self, task_type: str) -> float:
        seen = self._types.get(task_type)
        if seen is None or seen.gap is None:
            return self.window_s
        return min(self.window_s, max(MIN_PATIENCE_S, IDLE_GAPS * seen.gap))

    def idle(self, task_type: str, now: float) -> bool:
        """No request for the type within its patience, and no long poll waiting on it."""
        seen = self._types.get(task_type)
        if seen is None:
            return True
        return seen.waiters <= 0 and now - seen.last >= self.patience(task_type)

    def expire(self, now: float) -> bool:
        """Forget the demand of idle types; True if any was forgotten."""
        gone = [k for k in self.wanted if self.idle(k[0], now)]
        for k in gone:
            del self.wanted[k]
        for t in [t for t, s in self._types.items() if s.waiters <= 0 and t not in self.types()]:
            if now - self._types[t].last >= self.window_s:
                del self._types[t]  # a type asked for again later starts from the window
        return bool(gone)

    def types(self) -> set[str]:
        return {t for t, _worker in self.wanted}

    def room(self) -> int:
        return sum(n for _t, n in self.wanted.values())
