"""The core's frozen dataclasses pickle through their constructors (ADR 51).

A class compiled by mypyc pickles by setting each attribute of a blank instance again, and a
frozen dataclass's ``__setattr__`` refuses that (``FrozenInstanceError``): a compiled
``WorkflowDef`` could not come back from a process pool (``projections.replay``'s partition
groups return folded states). A reducer registered with ``copyreg`` rebuilds such a value with
its constructor instead, the same value in either build; every field is an ``__init__``
argument, in order (no ``init=False`` or ``kw_only`` field in the core).
"""

from __future__ import annotations

import copyreg
import dataclasses
from typing import Any


def _by_constructor(value: Any) -> tuple[type[Any], tuple[Any, ...]]:
    return type(value), tuple(getattr(value, f.name) for f in dataclasses.fields(value))


def frozen_dataclasses(namespace: dict[str, Any]) -> list[type[Any]]:
    """The frozen dataclasses a module defines (``namespace``: its ``globals()``)."""
    module = namespace["__name__"]
    return [
        value
        for value in list(namespace.values())
        if isinstance(value, type)
        and value.__module__ == module
        and dataclasses.is_dataclass(value)
        and value.__dataclass_params__.frozen  # type: ignore[attr-defined]
    ]


def frozen_by_constructor(namespace: dict[str, Any]) -> None:
    """Register every frozen dataclass a module defines (``namespace``: its ``globals()``)."""
    for cls in frozen_dataclasses(namespace):
        copyreg.pickle(cls, _by_constructor)
