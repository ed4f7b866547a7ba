"""Frozen dataclasses of the Python modules built without the frozen ``__setattr__``.

A frozen dataclass's generated ``__init__`` sets each field through ``object.__setattr__``, a
global lookup, an attribute lookup and a call per field, where a write into the instance's
``__dict__`` is one store. The decider builds an envelope and a payload for every event and a
command for every input, and the compiler cannot take ``events.py`` and ``commands.py`` (ADR
51), so those constructors stood out in its profile
(``bench/results/archive/decider_cpu_fastinit_media.json``).

``dict_init(globals())`` replaces the ``__init__`` of every frozen dataclass a module defines
with one of the same signature that stores into ``__dict__``. Nothing else changes: the class
stays frozen (assignment after construction still raises ``FrozenInstanceError``), equality,
hashing, ``repr``, ``dataclasses.replace`` and pickling are the dataclass's own. Only a plain
case is taken (every field an ``__init__`` argument, positional, no ``__post_init__``, no
``__slots__``); a class outside it keeps the dataclass's ``__init__``, so a field added with
one of those features stays correct, only slower. A compiled module's classes have no
``__dict__``: this is for ``events.py`` and ``commands.py``, which run as Python.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import Any

from es_sched.domain.pickling import frozen_dataclasses

_NO_DEFAULT = dataclasses.MISSING
_FACTORY = object()  # the parameter's default when the field has a default_factory


def _plain(cls: type[Any]) -> bool:
    """With a ``__dict__``, no ``__post_init__``, and the dataclass's ``__init__`` takes
    exactly its fields, in order, positionally (no ``InitVar``, ``init=False`` or ``kw_only``)."""
    if "__slots__" in cls.__dict__ or hasattr(cls, "__post_init__"):
        return False
    taken = list(inspect.signature(cls.__init__).parameters.values())[1:]
    return [p.name for p in taken] == [f.name for f in dataclasses.fields(cls)] and all(
        p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD for p in taken
    )


def _init_for(cls: type[Any]) -> Callable[..., None]:
    """An ``__init__`` with the dataclass's parameters, storing into ``__dict__``. Its own names
    are dunders, as the dataclass's are, so that no field name can shadow them."""
    scope: dict[str, Any] = {"__factory__": _FACTORY}
    params, body = [], []
    for f in dataclasses.fields(cls):
        name = f.name
        if f.default is not _NO_DEFAULT:
            scope[f"__default_{name}__"] = f.default
            params.append(f"{name}=__default_{name}__")
            body.append(f"__d__[{name!r}] = {name}")
        elif f.default_factory is not _NO_DEFAULT:
            scope[f"__factory_{name}__"] = f.default_factory
            params.append(f"{name}=__factory__")
            body.append(
                f"__d__[{name!r}] = __factory_{name}__() if {name} is __factory__ else {name}"
            )
        else:
            params.append(name)
            body.append(f"__d__[{name!r}] = {name}")
    lines = "\n".join(f"    {line}" for line in ["__d__ = __self__.__dict__", *body])
    exec(f"def __init__(__self__, {', '.join(params)}):\n{lines}\n", scope)  # noqa: S102
    init: Callable[..., None] = scope["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    return init


def dict_init(namespace: dict[str, Any]) -> None:
    """Give every plain frozen dataclass a module defines (``namespace``: its ``globals()``) an
    ``__init__`` that stores into ``__dict__``."""
    for cls in frozen_dataclasses(namespace):
        if _plain(cls):
            cls.__init__ = _init_for(cls)
