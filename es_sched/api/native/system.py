"""``GET /api/v1/system``: the deployment's role processes, alive, stale or stopped (ADR 61).

What each role process last published on ``<prefix>.system`` (``es_sched.kafka.roster``): its
deployment, role, instance, host, pid, version, start, partitions and lag, and its health by
``es_sched.roster.health`` (stale once not renewed for ``ES_SCHED_SYSTEM_STALE_AFTER_INTERVALS``
intervals). ``SystemBoard`` keeps the topic read once per API process, on a thread of its own,
so a request reads memory; it is a ``Services`` part, closed with them. The console's System
page (``api.ui.system``) shows the same answer.
"""

from __future__ import annotations

import logging
import threading
from datetime import UTC, datetime

from fastapi import APIRouter, Depends

from es_sched.api.auth import Principal, require
from es_sched.api.native.models import RoleProcess, System
from es_sched.api.services import Services, services
from es_sched.kafka.connection import connection
from es_sched.kafka.roster import RosterReader, system_topic
from es_sched.kafka.topics import topics_for
from es_sched.roster import Presence, health

router = APIRouter()
VIEWER = require("viewer")
SVC = Depends(services)
log = logging.getLogger(__name__)
POLL_S = 0.5  # the reader's longest wait for a record: how soon close() is heard


class SystemBoard:
    """``<prefix>.system`` kept read by a thread: the newest record of each role process."""

    def __init__(self, reader: RosterReader) -> None:
        self.reader = reader
        self._lock = threading.Lock()
        self._stop = threading.Event()
        reader.catch_up()
        self._records = reader.records()
        self._thread = threading.Thread(target=self._run, name="es-sched-system", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                if self.reader.poll(POLL_S):
                    with self._lock:
                        self._records = self.reader.records()
            except Exception:  # the broker away: the page shows the records it had, aging
                log.warning("reading the system topic", exc_info=True)
                self._stop.wait(1.0)

    def records(self) -> list[Presence]:
        with self._lock:
            return list(self._records)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.reader.close()


def system_board(svc: Services) -> SystemBoard:
    def make() -> SystemBoard:
        topic = system_topic(svc.settings)
        return SystemBoard(RosterReader(connection(svc.settings.kafka), topic))

    return svc.system_board.get(make)


@router.get("/system", response_model=System)
def get_system(svc: Services = SVC, who: Principal = VIEWER) -> System:
    return system_view(svc, system_board(svc).records(), datetime.now(UTC))


def system_view(svc: Services, records: list[Presence], now: datetime) -> System:
    """The records as the API answers them: by role, then instance."""
    sys = svc.settings.system
    mine = sys.deployment_id
    return System(
        deployment=mine,
        topic=topics_for(svc.settings).system,
        intervalS=sys.liveness_interval_s,
        staleAfterS=sys.stale_after_s,
        processes=[
            RoleProcess(
                deployment=p.deployment,
                role=p.role,
                instance=p.instance,
                host=p.host,
                pid=p.pid,
                version=p.version,
                startedAt=p.started_at,
                lastSeen=p.seen_at,
                silentS=round(max(0.0, (now - p.seen_at).total_seconds()), 1),
                partitions=list(p.partitions),
                lag=p.lag,
                health=health(p, now, sys.stale_after_s),
                foreign=p.deployment != mine,
            )
            for p in sorted(records, key=lambda p: (p.role, p.instance))
        ],
    )
