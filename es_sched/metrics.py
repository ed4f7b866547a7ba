"""A tiny Prometheus exporter: counters, gauges and histograms in the text format 0.0.4.

``Registry`` holds the metrics (thread-safe; the roles update them, the HTTP thread reads
them); ``serve(registry, port)`` answers ``GET /metrics`` on a daemon thread. Port 0 means no
endpoint (the metrics are still kept, which costs a few dict updates per tick). One process has
one registry and one endpoint: ``es-sched run`` passes the same registry to every role it runs,
so each role names its metrics after itself (``es_sched_decider_*``, ``es_sched_timers_*``...)
and the shared ones carry a ``role`` label. ``LagGauge`` turns a consumer's positions into the
``es_sched_consumer_lag_records`` gauge without a broker round trip.
"""

from __future__ import annotations

import bisect
import math
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, TypeVar

from confluent_kafka import KafkaException

if TYPE_CHECKING:
    from confluent_kafka import Consumer

Labels = tuple[tuple[str, str], ...]
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(labels: Labels, extra: Labels = ()) -> str:
    pairs = (*labels, *extra)
    if not pairs:
        return ""
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in pairs) + "}"


def _num(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value)) if not float(value).is_integer() else str(int(value))


class _Metric:
    kind = ""

    def __init__(self, name: str, help_text: str, lock: threading.Lock) -> None:
        self.name, self.help, self._lock = name, help_text, lock
        self.values: dict[Labels, float] = {}

    def _key(self, labels: dict[str, str]) -> Labels:
        return tuple(sorted(labels.items()))

    def value(self, **labels: str) -> float:
        with self._lock:
            return self.values.get(self._key(labels), 0.0)

    def lines(self) -> list[str]:
        return [f"{self.name}{_labels(k)} {_num(v)}" for k, v in sorted(self.values.items())]


class Counter(_Metric):
    kind = "counter"

    def inc(self, amount: float = 1.0, **labels: str) -> None:
        if amount < 0:
            raise ValueError("a counter only goes up")
        with self._lock:
            key = self._key(labels)
            self.values[key] = self.values.get(key, 0.0) + amount


class Gauge(_Metric):
    kind = "gauge"

    def set(self, value: float, **labels: str) -> None:
        with self._lock:
            self.values[self._key(labels)] = value

    def replace(self, rows: list[tuple[dict[str, str], float]]) -> None:
        """Every labelled value at once: label sets not given are gone (a state that ended,
        e.g. a queue placeable again, must not linger at its last value)."""
        with self._lock:
            self.values = {self._key(labels): value for labels, value in rows}


class Histogram(_Metric):
    kind = "histogram"

    def __init__(
        self, name: str, help_text: str, lock: threading.Lock, buckets: tuple[float, ...]
    ) -> None:
        super().__init__(name, help_text, lock)
        self.buckets = tuple(sorted(buckets))
        self.counts = [0] * (len(self.buckets) + 1)  # the last one is +Inf
        self.sum = 0.0

    def observe(self, value: float) -> None:
        with self._lock:
            self.counts[bisect.bisect_left(self.buckets, value)] += 1
            self.sum += value

    def lines(self) -> list[str]:
        out, running = [], 0
        for bound, count in zip((*self.buckets, math.inf), self.counts, strict=True):
            running += count
            out.append(f"{self.name}_bucket{_labels((), (('le', _num(bound)),))} {running}")
        out.append(f"{self.name}_sum {_num(self.sum)}")
        out.append(f"{self.name}_count {running}")
        return out


_M = TypeVar("_M", bound=_Metric)


class Registry:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._metrics: list[_Metric] = []
        # Each role's consumer lag and partitions by role name, which the role process's
        # liveness record reports (``es_sched.kafka.roster``).
        self.lags: dict[str, LagGauge] = {}

    def counter(self, name: str, help_text: str) -> Counter:
        return self._add(Counter(name, help_text, self._lock))

    def gauge(self, name: str, help_text: str) -> Gauge:
        return self._add(Gauge(name, help_text, self._lock))

    def histogram(
        self, name: str, help_text: str, buckets: tuple[float, ...] = LATENCY_BUCKETS
    ) -> Histogram:
        return self._add(Histogram(name, help_text, self._lock, buckets))

    def _add(self, metric: _M) -> _M:
        with self._lock:
            for m in self._metrics:
                if m.name == metric.name:  # roles sharing a registry share a metric
                    if type(m) is not type(metric):
                        raise ValueError(f"{metric.name} is already a {m.kind}")
                    return m
            self._metrics.append(metric)
        return metric

    def render(self) -> str:
        with self._lock:
            out: list[str] = []
            for m in self._metrics:
                out += [f"# HELP {m.name} {m.help}", f"# TYPE {m.name} {m.kind}", *m.lines()]
        return "\n".join(out) + "\n"


def serve(registry: Registry, port: int, host: str = "0.0.0.0") -> ThreadingHTTPServer | None:  # noqa: S104
    """Serve ``/metrics`` on a daemon thread; None when ``port`` is 0. Stop with shutdown()."""
    if port == 0:
        return None

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?")[0] != "/metrics":
                self.send_error(404)
                return
            body = registry.render().encode()
            self.send_response(200)
            self.send_header("Content-Type", CONTENT_TYPE)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass  # scrapes every few seconds would flood the role's log

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    return server


class LagGauge:
    """``es_sched_consumer_lag_records{role,topic}``: records between a consumer's positions and
    the high watermarks it last fetched (``cached=True``: no broker call), refreshed at most
    every ``every_s`` from the role's own thread (a consumer is not shared across threads)."""

    def __init__(self, registry: Registry, role: str, every_s: float = 1.0) -> None:
        self.gauge = registry.gauge(
            "es_sched_consumer_lag_records", "Records not yet consumed, by role and topic."
        )
        self.role, self.every_s, self._at = role, every_s, 0.0
        self.partitions: tuple[str, ...] = ()  # "topic[p]" the consumer held at the last update
        self.records: int | None = None  # their lag summed, None before the first update
        registry.lags[role] = self

    def update(
        self, consumer: Consumer, force: bool = False, cached: bool = True
    ) -> dict[str, int]:
        """``cached=False`` asks the broker (for a paused consumer, whose cached marks stall)."""
        now = time.monotonic()
        if not force and now - self._at < self.every_s:
            return {}
        self._at = now
        lag: dict[str, int] = {}
        held = consumer.position(consumer.assignment())
        self.partitions = tuple(sorted(f"{tp.topic}[{tp.partition}]" for tp in held))
        for tp in held:
            lag.setdefault(tp.topic, 0)
            try:
                marks = (
                    consumer.get_watermark_offsets(tp, cached=True)
                    if cached
                    else consumer.get_watermark_offsets(tp, timeout=1.0)
                )
            except KafkaException:  # the broker is away: a metric never stops its role
                continue
            if marks is not None and tp.offset >= 0 and marks[1] > tp.offset:
                lag[tp.topic] += int(marks[1]) - tp.offset
        for topic, n in lag.items():
            self.gauge.set(n, role=self.role, topic=topic)
        self.records = sum(lag.values())
        return lag
