"""Which build of the workflow core a process loads (ADR 51, ``es_sched/domain/__init__.py``):
the mypyc build only while it is this interpreter's and of exactly the sources beside it; and
both builds decide the golden histories alike."""

from __future__ import annotations

import copyreg
import hashlib
import importlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import sysconfig
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import pytest

import es_sched.domain
from es_sched.domain import compiled_build, engine
from es_sched.domain.definitions import WorkflowDef
from es_sched.domain.pickling import frozen_dataclasses
from es_sched.domain.state import WorkflowState
from testkit import ROOT
from tests.unit.domain.test_fanout import fan_out


def package(tmp_path: Path, **sources: str) -> Path:
    """A package folder with these ``.py`` files and a build record of them."""
    pkg = tmp_path / "core"
    (pkg / "_compiled").mkdir(parents=True)
    for name, text in sources.items():
        (pkg / f"{name}.py").write_text(text)
    record = {
        "soabi": sysconfig.get_config_var("SOABI"),
        "mypy": "test",
        "sources": {f"{n}.py": hashlib.sha256(t.encode()).hexdigest() for n, t in sources.items()},
    }
    (pkg / "_compiled" / "build.json").write_text(json.dumps(record))
    return pkg


def test_a_build_of_the_sources_beside_it_is_loaded(tmp_path: Path) -> None:
    pkg = package(tmp_path, engine="x = 1\n", events="y = 2\n")
    assert compiled_build(pkg, "auto") == (pkg / "_compiled", "compiled by mypyc test")


def test_a_changed_added_or_removed_source_outdates_the_build(tmp_path: Path) -> None:
    pkg = package(tmp_path, engine="x = 1\n", events="y = 2\n")
    (pkg / "events.py").write_text("y = 3\n")  # an imported class's layout may have changed
    folder, reason = compiled_build(pkg, "auto")
    assert folder is None and "(events.py; make core)" in reason, reason
    pkg = package(tmp_path / "b", engine="x = 1\n")
    (pkg / "new.py").write_text("")
    assert compiled_build(pkg, "auto")[1].endswith("(new.py; make core)")
    (pkg / "new.py").unlink()
    (pkg / "engine.py").unlink()
    assert compiled_build(pkg, "auto")[1].endswith("(engine.py; make core)")


def test_another_interpreters_build_or_none_is_not_loaded(tmp_path: Path) -> None:
    pkg = package(tmp_path, engine="x = 1\n")
    record = pkg / "_compiled" / "build.json"
    record.write_text(json.dumps({**json.loads(record.read_text()), "soabi": "cpython-39-x"}))
    folder, reason = compiled_build(pkg, "auto")
    assert folder is None and reason.startswith("the compiled build is for cpython-39-x"), reason
    record.unlink()
    assert compiled_build(pkg, "auto")[0] is None
    assert compiled_build(package(tmp_path / "b", e=""), "pure") == (None, "ES_SCHED_CORE=pure")


def child(code: str, core: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ES_SCHED_CORE": core}
    return subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_variable_is_checked_and_a_required_build_is_required() -> None:
    bad = child("import es_sched.domain", "fast")
    assert "ES_SCHED_CORE='fast': expected auto, compiled or pure" in bad.stderr
    pure = child("import es_sched.domain.engine as e; print(e.__file__)", "pure")
    assert pure.stdout.strip().endswith("es_sched/domain/engine.py"), pure.stderr
    package = Path(es_sched.domain.__file__).parent
    if compiled_build(package, "auto")[0] is None:  # no current build here: none to load
        required = child("import es_sched.domain", "compiled")
        assert "ES_SCHED_CORE=compiled, but " in required.stderr, required.stderr


NOT_COMPILED = (
    f"the core is not compiled here ({es_sched.domain.CORE_REASON}); "
    "make core compiles it where gcc and Python.h are"
)


@pytest.mark.skipif(es_sched.domain.CORE != "compiled", reason=NOT_COMPILED)
def test_the_compiled_core_is_what_runs_and_decides_the_golden_histories_as_python_does() -> None:
    where = Path(engine.__file__)  # mypyc names it after its shared library's folder
    assert "_compiled" in where.parts and where.suffix == ".so", where
    golden = Path(__file__).parent / "test_golden.py"
    python = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(golden)],
        env={**os.environ, "ES_SCHED_CORE": "pure"},
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert python.returncode == 0 and " passed" in python.stdout, python.stdout[-3000:]


def load_build_core() -> Any:
    """``tools/build_core.py``, which is not a package module."""
    spec = importlib.util.spec_from_file_location("build_core", ROOT / "tools" / "build_core.py")
    assert spec is not None and spec.loader is not None
    build_core = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build_core)
    return build_core


def test_a_machine_that_cannot_compile_is_told_what_to_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    build_core = load_build_core()
    if es_sched.domain.CORE == "compiled":  # this machine compiled the core: nothing missing
        assert build_core.missing_toolchain() is None
    monkeypatch.setattr(sysconfig, "get_paths", lambda: {"include": str(tmp_path)})
    assert build_core.missing_toolchain() == (
        f"no {tmp_path / 'Python.h'} (Debian: apt-get install python3-dev)"
    )
    monkeypatch.setattr(shutil, "which", lambda _: None)
    assert build_core.missing_toolchain().startswith("no C compiler (")


def test_a_folded_state_comes_back_from_a_process_pool_equal() -> None:
    """`projections.replay` folds partition groups in forked workers and returns their states
    pickled; a compiled frozen dataclass (a definition, a fan's index) refused to be rebuilt by
    pickle (CI, 2026-12-05: FrozenInstanceError) until ``domain.pickling``."""
    here = _folded()  # the same inputs, ids and clock give the same state in the worker
    assert here.fans and isinstance(here.definition, WorkflowDef)
    with ProcessPoolExecutor(1, mp_context=get_context("fork")) as pool:
        back = pool.submit(_folded).result()
    assert back == here
    assert back.fans == here.fans  # not compared by the state's own equality


def _folded() -> WorkflowState:
    drv = fan_out(4)  # a definition, task states and a dynamic fork's index (domain.fanout)
    drv.report("b1")
    return drv.st


def test_every_frozen_dataclass_the_compiler_builds_pickles_by_its_constructor() -> None:
    """A module `make core` compiles must call ``frozen_by_constructor(globals())``: otherwise its
    frozen dataclasses pickle in the Python core and fail only in the compiled one (the CI failure
    above). Checked in either build, so a module added without the call fails here first."""
    build_core = load_build_core()
    source = Path(es_sched.domain.__file__).parent
    compiled = sorted(p.stem for p in source.glob("*.py") if p.name not in build_core.NOT_COMPILED)
    frozen: dict[str, list[str]] = {}
    for name in compiled:
        module = importlib.import_module(f"es_sched.domain.{name}")
        frozen[name] = [cls.__name__ for cls in frozen_dataclasses(vars(module))]
        missing = [c for c in frozen[name] if getattr(module, c) not in copyreg.dispatch_table]
        assert not missing, f"{name}.py: add frozen_by_constructor(globals()) for {missing}"
    assert frozen["definitions"] and frozen["effects"], frozen  # the scan sees the known ones
