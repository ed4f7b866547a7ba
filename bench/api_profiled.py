"""``es-sched ARGS`` under cProfile on every thread, for the API benchmark's profile.

``python -m bench.api_profiled api --port P`` runs the CLI as ``python -m es_sched`` would,
with a profiler on the main thread (the event loop: async routes, uvicorn, the HTTP parsing)
and one on every thread started afterwards (FastAPI runs sync routes in a thread pool). When
the CLI returns (SIGTERM: uvicorn finishes and returns), the profiles are merged and written
to the file ``BENCH_API_PROFILE`` names (a pstats dump). pyinstrument is not in the venv, and
it samples only one thread.
"""

from __future__ import annotations

import cProfile
import os
import pstats
import runpy
import sys
import threading
from types import FrameType
from typing import Any

PROFILES: list[cProfile.Profile] = []


def _in_new_thread(_frame: FrameType, _event: str, _arg: Any) -> None:
    """threading's profile hook: replaced, in its thread, by a profiler of that thread."""
    profile = cProfile.Profile()
    PROFILES.append(profile)
    profile.enable()


def main() -> None:
    out = os.environ["BENCH_API_PROFILE"]
    threading.setprofile(_in_new_thread)
    main_profile = cProfile.Profile()
    sys.argv = ["es_sched", *sys.argv[1:]]
    main_profile.enable()
    try:
        runpy.run_module("es_sched", run_name="__main__", alter_sys=True)
    except SystemExit:
        pass
    finally:
        main_profile.disable()
        stats = pstats.Stats(main_profile)
        for profile in list(PROFILES):
            stats.add(profile)
        stats.dump_stats(out)


if __name__ == "__main__":
    main()
