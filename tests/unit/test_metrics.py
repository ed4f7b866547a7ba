"""The Prometheus text exporter: exposition format and the HTTP endpoint."""

from __future__ import annotations

import urllib.request

import pytest

from es_sched.metrics import CONTENT_TYPE, Registry, serve
from testkit.net import free_port


def test_text_format_of_counters_gauges_and_histograms() -> None:
    r = Registry()
    depth = r.gauge("es_sched_queue_depth", "Ready tasks waiting.")
    limited = r.counter("es_sched_rate_limited_total", "Refused by a limit.")
    latency = r.histogram("es_sched_dispatch_latency_seconds", "Latency.", buckets=(0.01, 0.1))
    depth.set(3, task_type="media.probe", priority="0")
    depth.set(7, task_type='we"ird\\', priority="8")
    limited.inc(limit="type_rate")
    limited.inc(2, limit="type_rate")
    for value in (0.005, 0.05, 0.5):
        latency.observe(value)
    text = r.render()
    assert text.endswith("\n")
    lines = text.splitlines()
    assert lines[:2] == [
        "# HELP es_sched_queue_depth Ready tasks waiting.",
        "# TYPE es_sched_queue_depth gauge",
    ]
    assert 'es_sched_queue_depth{priority="0",task_type="media.probe"} 3' in lines
    assert 'es_sched_queue_depth{priority="8",task_type="we\\"ird\\\\"} 7' in lines
    assert "# TYPE es_sched_rate_limited_total counter" in lines
    assert 'es_sched_rate_limited_total{limit="type_rate"} 3' in lines
    assert "# TYPE es_sched_dispatch_latency_seconds histogram" in lines
    assert 'es_sched_dispatch_latency_seconds_bucket{le="0.01"} 1' in lines
    assert 'es_sched_dispatch_latency_seconds_bucket{le="0.1"} 2' in lines
    assert 'es_sched_dispatch_latency_seconds_bucket{le="+Inf"} 3' in lines
    assert "es_sched_dispatch_latency_seconds_sum 0.555" in lines
    assert "es_sched_dispatch_latency_seconds_count 3" in lines
    assert limited.value(limit="type_rate") == 3


def test_an_unlabelled_counter_and_the_guard_against_going_down() -> None:
    r = Registry()
    c = r.counter("es_sched_dispatched_total", "Assigned.")
    assert r.render().splitlines()[-1].startswith("# TYPE")  # no sample yet
    c.inc()
    assert r.render().splitlines()[-1] == "es_sched_dispatched_total 1"
    with pytest.raises(ValueError, match="only goes up"):
        c.inc(-1)


def test_endpoint_serves_metrics_and_port_zero_is_off() -> None:
    assert serve(Registry(), 0) is None
    r = Registry()
    r.counter("es_sched_preemptions_total", "Preempted.").inc()
    server = serve(r, free_port(), host="127.0.0.1")
    assert server is not None
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
        with urllib.request.urlopen(url, timeout=5) as resp:
            assert resp.headers["Content-Type"] == CONTENT_TYPE
            assert "es_sched_preemptions_total 1" in resp.read().decode()
    finally:
        server.shutdown()
