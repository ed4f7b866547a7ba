"""The PostgreSQL projector role with a fault injected at its store: the process SIGKILLs itself
right after its Nth database commit, before the projector commits the Kafka offsets of that
batch (the crash the projection test needs; production code has no such hook).

Run as ``python -m tests.integration.doomed_projector N`` with the test's ES_SCHED_* env. It
builds the role ``es-sched run --role projector-pg`` runs (``bootstrap.role('projector-pg', ...)``)
and wraps the ``Store`` its projector writes through. Just before the kill it logs ``fault
injected: SIGKILL after store commit N``, so the test can tell its own fault from any other
death.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading

from es_sched import bootstrap
from es_sched.projections.roles import ProjectorRole
from es_sched.projections.store import Batch, Store
from es_sched.projections.views import Rows
from es_sched.settings import load_settings

FAULT = "fault injected: SIGKILL after store commit"
log = logging.getLogger("doomed_projector")


class KillAfterCommits:
    """A ``Store`` that delegates to ``inner`` and kills the process once its Nth ``write``
    has returned (committed)."""

    def __init__(self, inner: Store, after: int) -> None:
        self.inner, self.after, self.commits = inner, after, 0
        self.name = inner.name

    def load(self, workflow_ids: list[str]) -> dict[str, Rows]:
        return self.inner.load(workflow_ids)

    def checkpoints(self, topic: str, partitions: list[int]) -> dict[int, int]:
        return self.inner.checkpoints(topic, partitions)

    def write(self, topic: str, batch: Batch) -> None:
        self.inner.write(topic, batch)
        self.commits += 1
        if self.commits == self.after:
            log.warning("%s %d", FAULT, self.commits)
            for handler in logging.getLogger().handlers:
                handler.flush()
            os.kill(os.getpid(), signal.SIGKILL)

    def ensure(self) -> None:
        self.inner.ensure()

    def close(self) -> None:
        self.inner.close()


def main() -> None:
    logging.basicConfig(level="INFO", format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = load_settings()
    store = KillAfterCommits(bootstrap.pg_store(settings), int(sys.argv[1]))  # the Store port
    role = ProjectorRole(settings, store)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    role.run(stop)


if __name__ == "__main__":
    main()
