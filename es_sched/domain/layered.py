"""``Layered``: an insertion-ordered map whose copy costs O(recent changes), not O(size).

A workflow's task map is copied for every decision (``WorkflowState.clone``: the caller keeps
the state it passed). For a large fan-out a ``dict`` copy, and freeing the old one, is most of
a decision's time (ADR 19). A ``Layered`` map is a shared base ``dict`` that nobody changes and
a small private top ``dict`` of the changes since; a copy shares the base and copies the top.
When the top grows past about the square root of the base, a write folds it into a new base
(the old one stays with the states that share it), so a write costs O(sqrt n) amortised and a
copy O(sqrt n) at most.

It behaves as the ``dict`` it replaces: iteration in first-insertion order (a changed key keeps
its place, a new key goes last), equality by items. Keys are never removed (a workflow's
tasks and references only grow).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from math import isqrt
from typing import Any, Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")
_MISSING: Any = object()
MIN_TOP = 32  # below this many changes a top layer is never folded (small maps stay cheap)


class Layered(Mapping[K, V], Generic[K, V]):
    __slots__ = ("_added", "_base", "_top")

    def __init__(self, base: dict[K, V] | None = None) -> None:
        self._base: dict[K, V] = base if base is not None else {}
        self._top: dict[K, V] = {}
        self._added = 0  # keys in the top layer that the base does not have

    def copy(self) -> Layered[K, V]:
        new: Layered[K, V] = Layered.__new__(Layered)
        new._base, new._top, new._added = self._base, dict(self._top), self._added
        return new

    def __getitem__(self, key: K) -> V:
        value = self._top.get(key, _MISSING)
        return self._base[key] if value is _MISSING else value

    def get(self, key: K, default: Any = None) -> Any:
        value = self._top.get(key, _MISSING)
        return self._base.get(key, default) if value is _MISSING else value

    def __contains__(self, key: object) -> bool:
        return key in self._top or key in self._base

    def __len__(self) -> int:
        return len(self._base) + self._added

    def __iter__(self) -> Iterator[K]:
        yield from self._base
        base = self._base
        yield from (k for k in self._top if k not in base)

    def values(self) -> Iterator[V]:  # type: ignore[override]
        top = self._top
        if not top:
            yield from self._base.values()
            return
        for key, value in self._base.items():
            yield top.get(key, value)
        base = self._base
        yield from (v for k, v in top.items() if k not in base)

    def items(self) -> Iterator[tuple[K, V]]:  # type: ignore[override]
        top = self._top
        for key, value in self._base.items():
            yield key, top.get(key, value)
        base = self._base
        yield from ((k, v) for k, v in top.items() if k not in base)

    def __setitem__(self, key: K, value: V) -> None:
        """Only on a private copy (``WorkflowState.clone``), like the ``dict`` it replaces."""
        if key not in self._top and key not in self._base:
            self._added += 1
        self._top[key] = value
        if len(self._top) > MIN_TOP + isqrt(len(self._base)):
            self._base, self._top, self._added = {**self._base, **self._top}, {}, 0

    def __repr__(self) -> str:
        return f"Layered({dict(self.items())!r})"


def layered(mapping: Mapping[K, V]) -> Layered[K, V]:
    """A private copy of ``mapping`` to change: O(changes) for a ``Layered`` one."""
    if isinstance(mapping, Layered):
        return mapping.copy()
    return Layered(dict(mapping))
