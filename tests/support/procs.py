"""Processes as ``/proc`` shows them (Linux): the children of a process, and their command
lines, to wait for what a child process is doing right now."""

from __future__ import annotations

from pathlib import Path


def children(parent: int, name: str) -> list[int]:
    """The pids of ``parent``'s children called ``name`` (zombies included: those have not
    been reaped yet)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue  # gone meanwhile
        comm = text[text.index("(") + 1 : text.rindex(")")]
        ppid = int(text[text.rindex(")") + 2 :].split()[1])
        if comm == name and ppid == parent:
            found.append(int(stat.parent.name))
    return found


def cmdline(pid: int) -> list[str]:
    """The arguments ``pid`` runs with; empty once it is gone or a zombie."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [arg.decode(errors="replace") for arg in raw.split(b"\0") if arg]
