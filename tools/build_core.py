"""Compile the workflow core (``es_sched/domain``) with mypyc into ``es_sched/domain/_compiled``.

ADR 51. The decider spends most of its CPU in these modules (``bench/decider_cpu.py``), and they
are already typed for ``mypy --strict``, which is what mypyc compiles from. The build goes to a
folder of its own, never beside the sources, with a record of the sources it was built from:
``es_sched.domain`` loads it only while it matches them, so an edited checkout runs its edits
(as Python) until the next ``make core``, never a stale build.

Not compiled, each for a reason found when it was tried:

- ``__init__.py``: it chooses the build;
- ``commands.py``, ``events.py``: mypyc (2.4) treats a ``ClassVar`` of a compiled dataclass
  as an instance field, so ``TYPE`` became a field with a default and every subclass failed at
  import ("non-default argument follows default argument"); with ``TYPE`` declared without a
  value, construction fails instead ("attribute 'TYPE' is read-only"). Reproduced with and
  without ``from __future__ import annotations``; open upstream as mypyc/mypyc#740 and #1122;
- ``state.py``: its ``clone`` copies ``__dict__``, which a native class has not; compiled with a
  ``dataclasses.replace`` clone it measured slower (9.0k against 9.2k media inputs/s).

Where the machine cannot compile (no C compiler, or no ``Python.h``: Debian's ``gcc`` and
``python3-dev`` packages), it says so, removes any earlier build and exits 0: es-sched then
runs the same modules as Python (``ES_SCHED_CORE=auto``), and ``make test`` says it skipped the
compiled core's checks.

Rerun: ``make core`` (or `.venv/bin/python tools/build_core.py`); about 30 s on 2 cores.
"""

from __future__ import annotations

import hashlib
import json
import shlex
import shutil
import sysconfig
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "es_sched" / "domain"
NOT_COMPILED = ("__init__.py", "commands.py", "events.py", "state.py")


def missing_toolchain() -> str | None:
    """Why this machine cannot build a C extension for this interpreter, or None."""
    compiler = shlex.split(sysconfig.get_config_var("CC") or "cc")[0]
    if shutil.which(compiler) is None:
        return f"no C compiler ({compiler}; Debian: apt-get install gcc)"
    header = Path(sysconfig.get_paths()["include"], "Python.h")
    if not header.exists():
        return f"no {header} (Debian: apt-get install python3-dev)"
    return None


def main() -> None:
    from mypy.version import __version__ as mypy_version  # noqa: PLC0415 (a dev dependency)
    from mypyc.build import mypycify  # noqa: PLC0415
    from setuptools import Distribution  # noqa: PLC0415

    target = PACKAGE / "_compiled"
    missing = missing_toolchain()
    if missing is not None:
        shutil.rmtree(target, ignore_errors=True)
        print(f"es-sched: the workflow core stays Python (ADR 51): {missing}")
        return
    sources = sorted(p for p in PACKAGE.glob("*.py"))
    compiled = [str(p.relative_to(ROOT)) for p in sources if p.name not in NOT_COMPILED]
    # Hashed before the build: a file edited while it runs leaves a record that does not match.
    record = {
        "soabi": sysconfig.get_config_var("SOABI"),
        "mypy": mypy_version,
        "compiled": [Path(p).stem for p in compiled],
        "sources": {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sources},
    }
    with tempfile.TemporaryDirectory(prefix="es-sched-core-") as tmp:
        # group_name puts mypyc's shared library inside the package (es_sched.domain._core__mypyc),
        # so it is found on the package's path like the modules, not on sys.path.
        extensions = mypycify(
            compiled, opt_level="3", group_name="es_sched.domain._core", target_dir=f"{tmp}/c"
        )
        dist = Distribution({"name": "es-sched-core", "ext_modules": extensions})
        build = dist.get_command_obj("build_ext")
        build.build_lib = str(Path(tmp, "lib"))
        build.build_temp = str(Path(tmp, "tmp"))
        build.parallel = 2
        dist.run_command("build_ext")
        built = Path(tmp, "lib", "es_sched", "domain")
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(built, target)
    (target / "build.json").write_text(json.dumps(record, indent=1) + "\n")
    print(f"compiled {len(compiled)} modules of es_sched.domain into {target.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
