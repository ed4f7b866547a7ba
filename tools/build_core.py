"""Compile the workflow core (``es_sched/domain``) with mypyc into ``es_sched/domain/_compiled``.

ADR 51. The decider spends most of its CPU in these modules (``bench/decider_cpu.py``), and they
are already typed for ``mypy --strict``, which is what mypyc compiles from. The build goes to a
folder of its own, never beside the sources, with a record of the sources it was built from:
``es_sched.domain`` loads it only while it matches them, so an edited checkout runs its edits
(as Python) until the next ``make core``, never a stale build.

Not compiled, each for a reason found when it was tried:

- ``__init__.py``: it chooses the build;
- ``commands.py``, ``events.py``: mypyc (2.x) loses ``ClassVar`` from the annotations of a
  compiled dataclass under ``from __future__ import annotations``, so ``TYPE`` became a field
  with a default and every subclass failed at import ("non-default argument follows default
  argument");
- ``state.py``: its ``clone`` copies ``__dict__``, which a native class has not; compiled with a
  ``dataclasses.replace`` clone it measured slower (9.0k against 9.2k media inputs/s).

Rerun: ``make core`` (or `.venv/bin/python tools/build_core.py`); about 30 s on 2 cores.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sysconfig
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "es_sched" / "domain"
NOT_COMPILED = ("__init__.py", "commands.py", "events.py", "state.py")


def main() -> None:
    from mypy.version import __version__ as mypy_version  # noqa: PLC0415 (a dev dependency)
    from mypyc.build import mypycify  # noqa: PLC0415
    from setuptools import Distribution  # noqa: PLC0415

    sources = sorted(p for p in PACKAGE.glob("*.py"))
    compiled = [str(p.relative_to(ROOT)) for p in sources if p.name not in NOT_COMPILED]
    target = PACKAGE / "_compiled"
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
        extensions = mypycify(compiled, opt_level="3", group_name="es_sched.domain._core",
                              target_dir=f"{tmp}/c")  # fmt: skip
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
