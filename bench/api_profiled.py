"""``es-sched ARGS`` under cProfile on every thread, for the API benchmark's profile.

``python -m bench.api_profiled api --port P`` runs the CLI as ``python -m es_sched`` would,
with a profiler on the main thread (the event loop: async routes, uvicorn, the HTTP parsing)
and one on every thread started afterwards (FastAPI runs sync routes in a thread pool). When
the CLI returns (SIGTERM: uvicorn finishes and returns), the profiles are merged and written
to the file ``BENCH_API_PROFILE`` names (a pstats dump). SIGUSR1 starts the main thread's
profile afresh (the benchmark sends it once the server answers, so start-up imports are left
out). pyinstrument is not in the venv, and it samples only one thread.
"""

from __future__ import annotations

import cProfile
import os
import pstats
import runpy
import signal
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
    main_profile = [cProfile.Profile()]

    def afresh(_signum: int, _frame: FrameType | None) -> None:
        # Signal handlers run on the main thread: the new profile replaces the old one there.
        main_profile[0].disable()
        main_profile[0] = cProfile.Profile()
        main_profile[0].enable()

    signal.signal(signal.SIGUSR1, afresh)
    sys.argv = ["es_sched", *sys.argv[1:]]
    main_profile[0].enable()
    try:
        runpy.run_module("es_sched", run_name="__main__", alter_sys=True)
    except SystemExit:
        pass
    finally:
        main_profile[0].disable()
        stats = pstats.Stats(main_profile[0])
        for profile in list(PROFILES):
            stats.add(profile)
        stats.dump_stats(out)


if __name__ == "__main__":
    main()
