"""The pure workflow core of es-sched.

Contract: modules in this package import only the standard library and each other. They do no
I/O, never read the clock and draw no random numbers; the shell passes ``now`` and new ids in.
The import-linter contract in ``pyproject.toml`` enforces this.

Which build of these modules a process runs is chosen here, once, at import (ADR 51): the
modules as compiled by mypyc (``make core`` writes them to ``_compiled/`` with a record of the
sources they were built from) when that build is this interpreter's and of exactly the sources
beside it, else these Python files. The compiled modules are the same code, checked by the same
tests (``make test`` runs on them wherever they could be built); the choice reads files and one
environment variable, and is the only I/O of the package:

- ``ES_SCHED_CORE=auto`` (the default): the compiled build if it is current, else Python;
- ``ES_SCHED_CORE=compiled``: the compiled build or an ImportError saying why not;
- ``ES_SCHED_CORE=pure``: these Python files (a debugger, coverage, a test that replaces a core
  function: compiled callers bind their callees when they are built).

``CORE`` says which build was loaded and ``CORE_REASON`` why.
"""

from __future__ import annotations

import hashlib
import json
import os
import sysconfig
from pathlib import Path

BUILD_RECORD = "build.json"


def compiled_build(package: Path, wanted: str) -> tuple[Path | None, str]:
    """The folder of a current compiled build of ``package``'s modules, or None; and why.

    Current means: built for this interpreter (its ABI tag) from files whose SHA-256 equal every
    ``.py`` file of ``package`` now, none added or removed: a compiled module encodes the
    layout of the classes it imports, so a changed ``events.py`` outdates a compiled ``evolve``.
    """
    if wanted == "pure":
        return None, "ES_SCHED_CORE=pure"
    folder = package / "_compiled"
    try:
        record = json.loads((folder / BUILD_RECORD).read_text())
    except (OSError, ValueError):
        return None, f"no compiled build in {folder} (make core)"
    soabi = sysconfig.get_config_var("SOABI")
    if record.get("soabi") != soabi:
        return None, f"the compiled build is for {record.get('soabi')}, this interpreter {soabi}"
    now = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in package.glob("*.py")}
    built = record.get("sources", {})
    changed = sorted(name for name in now.keys() | built.keys() if now.get(name) != built.get(name))
    if changed:
        return None, f"sources changed since the compiled build ({', '.join(changed)}; make core)"
    return folder, f"compiled by mypyc {record.get('mypy', '?')}"


def _choose() -> tuple[str, str]:
    wanted = os.environ.get("ES_SCHED_CORE", "auto")
    if wanted not in ("auto", "compiled", "pure"):
        raise ImportError(f"ES_SCHED_CORE={wanted!r}: expected auto, compiled or pure")
    folder, reason = compiled_build(Path(__file__).parent, wanted)
    if folder is None:
        if wanted == "compiled":
            raise ImportError(f"ES_SCHED_CORE=compiled, but {reason}")
        return "pure", reason
    __path__.insert(0, str(folder))  # the package's submodules are looked up there first
    return "compiled", reason


CORE, CORE_REASON = _choose()
