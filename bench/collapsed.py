"""Summarise a py-spy collapsed-stack profile (``--format raw``): the top functions by self and
by inclusive samples, as text for bench/results/current/profiles/.

Rerun: `.venv/bin/python bench/collapsed.py PROFILE.raw [--top 30] [--within step]`
(``--within NAME``: only stacks that pass through a frame whose function is NAME, e.g. the
decider's ``TransactionalLoop.run``, so start-up and restore do not dilute the shares).
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from pathlib import Path

FRAME = re.compile(r"^(?P<fn>[^ ]+) \((?P<file>[^:]+)(?::\d+)?\)$")


def frame_name(frame: str) -> str:
    """``fn (path/to/mod.py:12)`` -> ``fn (mod.py)``: lines merged, the module kept."""
    m = FRAME.match(frame.strip())
    if m is None:
        return frame.strip()
    return f"{m['fn']} ({'/'.join(Path(m['file']).parts[-2:])})"


def summarise(text: str, top: int, within: str | None) -> str:
    own: Counter[str] = Counter()
    incl: Counter[str] = Counter()
    total = 0
    for line in text.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = [frame_name(f) for f in stack.split(";")]
        if within is not None and not any(f.split(" ")[0] == within for f in frames):
            continue
        n = int(count)
        total += n
        own[frames[-1]] += n
        for f in set(frames):
            incl[f] += n
    out = [f"samples: {total}" + (f" (stacks through {within})" if within else "")]
    for title, counter in (("self", own), ("inclusive", incl)):
        out.append(f"\n-- top {top} by {title} samples --")
        for name, n in counter.most_common(top):
            out.append(f"{100 * n / max(total, 1):6.1f}%  {n:6d}  {name}")
    return "\n".join(out) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("profile", type=Path)
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--within")
    opts = parser.parse_args()
    print(summarise(opts.profile.read_text(), opts.top, opts.within), end="")


if __name__ == "__main__":
    main()
