"""How fresh an answer is, and read-your-writes (``?after=TOKEN``; ADR 23, ADR 28).

``reflects`` is the PostgreSQL projection's checkpoint per events partition (the rows reflect
every event below it; ``queries.reflected``), ``lag`` the events between it and the end of the
partition's last record, read just after (the high watermark less the commit marker a quiet
partition ends with: ``EventEnds.record_ends``). ``after`` waits with
``projections.freshness.wait_projected``, which blocks: the routes that call it are plain
``def`` routes, which FastAPI runs in its thread pool, so the event loop never waits on it; the
wait is bounded by ``ES_SCHED_API_READ_YOUR_WRITES_TIMEOUT_S`` and answers 504 with the reason
when it runs out.
"""

from __future__ import annotations

from es_sched.api.errors import ApiError
from es_sched.api.native.models import Freshness
from es_sched.api.readers import event_ends
from es_sched.api.reflected import reflected
from es_sched.api.services import Services
from es_sched.projections import freshness


def freshness_of(svc: Services) -> Freshness:
    """Read the checkpoints first, the ends after: the lag is never understated."""
    topic = event_ends(svc).topic
    reflects = reflected(svc, topic)  # a lower bound, cached briefly (es_sched.api.reflected)
    ends = event_ends(svc).record_ends(event_ends(svc).ends(), reflects)
    lag = {p: max(0, end - reflects.get(p, 0)) for p, end in ends.items()}
    return Freshness(
        topic=topic,
        reflects={p: reflects.get(p, 0) for p in ends},
        lag=lag,
        lagging=any(lag.values()),
    )


def wait_after(svc: Services, after: str | None) -> None:
    """Block until the read model has the events of the command ``after`` names (or 504)."""
    if after is None:
        return
    token = freshness.Token.parse(after)  # an EsSchedError: 400 with the expected shape
    timeout = svc.settings.api.read_your_writes_timeout_s
    try:
        freshness.wait_projected(svc.settings, svc.pg.get(), token, timeout)
    except freshness.NotFreshYet as exc:
        raise ApiError(504, f"not reflected within {timeout:g}s: {exc}") from None
