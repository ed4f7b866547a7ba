"""The API benchmark end to end at toy size: ``bench/api.py`` seeds 200 workflows through the
pure core, the projectors' fold and ``PgStore.write``, serves them with ``es-sched api``, loads
every endpoint for 2 s from its separate load process and writes its JSON and PNG. Checked:
the document's fields, the seed's rows and its reuse, and that every request sent got a status
(an HTTP status or an error) — never speed. An endpoint not built yet answers 404 and is
reported absent; the baseline (a static file) is always there to measure."""

from __future__ import annotations

import importlib.util
import io
import json
from pathlib import Path
from types import ModuleType

import pytest
from rich.console import Console
from sqlalchemy import text

from es_sched.projections.postgres.store import engine_for
from testkit.runtime import Env

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def _module(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_api_benchmark_runs_and_accounts_for_every_request(tmp_path: Path) -> None:
    bench = _module("api")
    env = Env()
    out, png = tmp_path / "api.json", tmp_path / "api.png"
    opts = bench.parser().parse_args(
        [
            "--workflows",
            "200",
            "--runs",
            "1",
            "--seconds",
            "2",
            "--warmup",
            "0.2",
            "--clients",
            "5",
            "--no-profile",
            "--no-workers",
            "--out",
            str(out),
            "--png",
            str(png),
        ]
    )
    console = Console(file=io.StringIO(), width=200)
    try:
        bench.report(bench.run(opts, console, env), console, png)
        doc = json.loads(out.read_text())
        engine = engine_for(env.settings)
        with engine.connect() as conn:
            stored = conn.execute(text("SELECT count(*) FROM workflows")).scalar()
            statuses = {s for (s,) in conn.execute(text("SELECT DISTINCT status FROM workflows"))}
        engine.dispose()
        again = bench.api_seed.seed(env.settings, 200, 1)
    finally:
        bench.drop(env)

    assert stored == 200
    assert {"COMPLETED", "RUNNING", "FAILED"} <= statuses
    assert again.reused, "a schema whose marker matches is reused"
    assert doc["benchmark"] == "api"
    assert doc["seed"]["workflows"] == 200 and doc["seed"]["events"] > 200
    assert doc["seed"]["workflows_per_second"] > 0
    # --api-workers 1,2 (the default): each load against both servers, 1 worker suffixed.
    plain = {"detail", "search", "list", "poll", "baseline"}
    assert set(doc["endpoints"]) == plain | {f"{n}@1w" for n in plain}
    assert doc["load"]["api_workers"] == [1, 2]
    assert doc["workers"] == {"status": "skipped"}
    assert doc["code"]["commit"] and len(doc["machine"]["load_average_before"]) == 3
    for name, e in doc["endpoints"].items():
        if e["status"] == "absent":
            assert e["reason"].startswith("404"), name
            assert e["per_run"] == []
            continue
        assert e["status"] == "measured", name
        (run,) = e["per_run"]
        assert run["requests"] > 0, name
        assert run["answered"] == run["requests"] == sum(run["statuses"].values()), name
        for field in ("requests_per_second", "p50_ms", "p99_ms", "percentiles_ms"):
            assert field in run, (name, field)
        assert set(e["median"]) == {"requests_per_second", "p50_ms", "p99_ms"}
    assert doc["endpoints"]["baseline"]["status"] == "measured"
    assert set(doc["endpoints"]["baseline"]["per_run"][0]["statuses"]) == {"200"}
    assert png.read_bytes().startswith(b"\x89PNG")
    assert "baseline" in console.file.getvalue()  # type: ignore[attr-defined]


def test_the_routes_benchmark_measures_every_route_idle_and_busy(tmp_path: Path) -> None:
    """``bench/api.py --routes`` at toy size, this checkout only: every ``/api/v1`` route and
    console page answered 2xx idle and busy, each request accounted for."""
    bench = _module("api")
    env = Env()
    out = tmp_path / "api_routes.json"
    opts = bench.parser().parse_args(
        [
            "--routes",
            "--workflows",
            "200",
            "--runs",
            "1",
            "--seconds",
            "0.5",
            "--idle-seconds",
            "0.5",
            "--warmup",
            "0",
            "--clients",
            "3",
            "--out",
            str(out),
        ]
    )
    console = Console(file=io.StringIO(), width=200)
    try:
        bench.report_routes(bench.measure_routes(opts, console, env), console)
        doc = json.loads(out.read_text())
    finally:
        bench.drop(env)

    assert doc["benchmark"] == "api_routes"
    assert set(doc["routes"]) == set(bench.ROUTE_PAGES)
    assert doc["seed"]["settled"] >= env.partitions
    assert all(probe == {"probe": 200} for probe in doc["probes"].values()), doc["probes"]
    for name, r in doc["routes"].items():
        assert "before" not in r, name  # no --before: this checkout only
        for kind in ("idle", "busy"):
            (run,) = r["after"][kind]["per_run"]
            assert run["requests"] > 0, (name, kind)
            assert run["answered"] == run["requests"] == sum(run["statuses"].values())
            assert set(run["statuses"]) == {"200"}, (name, kind, run["statuses"])
            assert set(r["after"][kind]["median"]) == {"p50_ms", "p99_ms", "requests_per_second"}
    assert doc["load"]["busy"]["clients"] == 3
    assert "v1_queues" in console.file.getvalue()  # type: ignore[attr-defined]
