"""CPU per lease token sealed and opened (ADR 74): what sealing adds to each grant on the
dispatcher and to each assignment read on a worker, next to the anonymous sealed box it was
chosen over.

- ``box_seal_us`` / ``box_open_us``: ``es_sched.serialization.sealed`` as the roles use it, a
  NaCl box between the dispatcher's and the worker's keys, its key agreement cached per key
  (the steady state: one agreement per worker key and per dispatcher key, then none).
- ``first_seal_us``: a seal to a worker key not seen before (the agreement included): once per
  worker process.
- ``sealed_box_seal_us`` / ``sealed_box_open_us``: libsodium's anonymous sealed box, an
  ephemeral key and an agreement for every token.

CPU time (``time.process_time``) per operation, ``--n`` operations a run, ``--runs`` runs
(default 3); the medians are written. No broker needed:
`PYTHONPATH=. .venv/bin/python bench/lease_seal.py`. Writes
bench/results/archive/lease_seal.json: the A/B that chose the box for ADR 74 (``--out``
elsewhere).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from nacl.public import SealedBox  # noqa: E402

from es_sched.serialization import sealed  # noqa: E402

OUT = ROOT / "bench" / "results" / "archive" / "lease_seal.json"
TOKEN = "9f86d081884c7d659a2feaa0c55ad015"  # noqa: S105 - made up: 16 random bytes in hex


def per_op_us(op: Callable[[], object], n: int) -> float:
    start = time.process_time()
    for _ in range(n):
        op()
    return (time.process_time() - start) / n * 1e6


def one_run(n: int) -> dict[str, float]:
    worker, dispatcher = sealed.LeaseKey(), sealed.Sealer()
    key = worker.public  # as its status publishes it
    token = dispatcher.seal(TOKEN, key)
    worker.open(token)  # its box cached, as after the first assignment
    anonymous = SealedBox(sealed.public_key(key).key)
    opener = SealedBox(worker._private)
    box = anonymous.encrypt(TOKEN.encode())
    keys = [sealed.LeaseKey().public for _ in range(min(n, 500))]
    fresh = iter(keys)
    return {
        "box_seal_us": per_op_us(lambda: dispatcher.seal(TOKEN, key), n),
        "box_open_us": per_op_us(lambda: worker.open(token), n),
        "first_seal_us": per_op_us(lambda: dispatcher.seal(TOKEN, next(fresh)), len(keys)),
        "sealed_box_seal_us": per_op_us(lambda: anonymous.encrypt(TOKEN.encode()), n),
        "sealed_box_open_us": per_op_us(lambda: opener.decrypt(box), n),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=5000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    runs = [one_run(args.n) for _ in range(args.runs)]
    median = {k: round(statistics.median(r[k] for r in runs), 1) for k in runs[0]}
    out = {
        "benchmark": "lease_seal",
        "cores": os.cpu_count(),
        "runs": args.runs,
        "ops_per_run": args.n,
        "unit": "CPU microseconds per operation",
        "median": median,
        "per_run": [{k: round(v, 1) for k, v in r.items()} for r in runs],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(median, indent=1))


if __name__ == "__main__":
    main()
