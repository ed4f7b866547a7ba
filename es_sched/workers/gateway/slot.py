"""One gateway worker id per API process of a host and port (ADR 24).

``es-sched api --workers N`` runs N processes on one port, and each builds a gateway worker. Two
gateways under one worker id share one consumer group on the assignments topic and overwrite
each other's status, so every task leased to the gateway that does not own the partition is
stranded (bench/api_workers.py with several API workers shows it). The id must also stay the same
when a process restarts, so its committed position and the tasks HTTP workers took from it (the
gateway store) are resumed. So each process claims the lowest free slot of its host and port
with an exclusive ``flock`` on a file: the kernel releases it when the process dies, and the
process replacing it claims the same slot. Slot 0 is the bare id, the one a single-process API
uses.
"""

from __future__ import annotations

import fcntl
import tempfile
from pathlib import Path
from typing import IO

from es_sched.errors import EsSchedError

MAX_SLOTS = 64  # ES_SCHED_API_WORKERS is at most 64


def claim(base: str, folder: Path | None = None) -> tuple[str, IO[bytes]]:
    """The worker id for this process (``base``, or ``base-<slot>`` past slot 0) and the open
    lock file that holds the slot (closing it frees the slot)."""
    where = folder or Path(tempfile.gettempdir())
    for slot in range(MAX_SLOTS):
        held = (where / f"es-sched-{base}-{slot}.lock").open("ab")
        try:
            fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            held.close()
            continue
        return (base if slot == 0 else f"{base}-{slot}"), held
    raise EsSchedError(f"all {MAX_SLOTS} gateway slots of {base} are held by other processes")
