"""``domain.fastinit``: the constructors that store into ``__dict__`` build what the
dataclass's own ``__init__`` builds, refuse what it refuses, and leave every class they cannot
take exactly as the dataclass made it."""

from __future__ import annotations

import dataclasses
import pickle
from dataclasses import InitVar, dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest

from es_sched.domain import commands, events
from es_sched.domain.fastinit import dict_init


def _twins() -> tuple[type[Any], type[Any]]:
    """The same frozen dataclass twice: the dataclass's ``__init__``, then ``dict_init``'s."""

    def make() -> type[Any]:
        @dataclass(frozen=True)
        class Base:
            a: str

        @dataclass(frozen=True)
        class Twin(Base):
            b: int = 4
            c: list[int] = field(default_factory=list)
            d: str | None = None  # also the name of a local variable once
            self: str = ""  # and of the dataclass's first parameter

        return Twin

    plain, fast = make(), make()
    dict_init({"__name__": fast.__module__, "Twin": fast})
    assert fast.__init__ is not plain.__init__  # replaced: the checks below compare two inits
    return plain, fast


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [
        (("x",), {}),
        (("x", 7), {"d": "z"}),
        ((), {"a": "x", "c": [1], "b": 0}),
        (("x", 1, [2], "q"), {}),
    ],
)
def test_a_replaced_constructor_builds_what_the_dataclass_builds(
    args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    plain, fast = _twins()
    want, got = plain(*args, **kwargs), fast(*args, **kwargs)
    assert dataclasses.asdict(got) == dataclasses.asdict(want)
    assert repr(got).replace("Twin", "") == repr(want).replace("Twin", "")
    assert dataclasses.replace(got, b=9).b == 9 and dataclasses.replace(got, b=9).a == got.a
    with pytest.raises(dataclasses.FrozenInstanceError):
        got.a = "changed"


def test_a_default_factory_gives_each_instance_its_own_value() -> None:
    _, fast = _twins()
    one, two = fast("x"), fast("y")
    one.c.append(1)
    assert two.c == [] and one.c == [1]


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((), {}, "missing 1 required positional argument: 'a'"),
        (("x",), {"e": 1}, "unexpected keyword argument 'e'"),
        (("x", 1, [], None, "", 5), {}, "takes from 2 to 6 positional arguments but 7 were given"),
        (("x",), {"a": "y"}, "got multiple values for argument 'a'"),
    ],
)
def test_a_replaced_constructor_refuses_what_the_dataclass_refuses(
    args: tuple[Any, ...], kwargs: dict[str, Any], message: str
) -> None:
    for cls in _twins():
        with pytest.raises(TypeError, match=message):
            cls(*args, **kwargs)


def test_a_class_it_cannot_take_keeps_the_dataclass_constructor() -> None:
    @dataclass(frozen=True)
    class Posted:
        a: int

        def __post_init__(self) -> None:
            object.__setattr__(self, "a", self.a + 1)

    @dataclass(frozen=True)
    class Keyworded:
        a: int = field(kw_only=True)

    @dataclass(frozen=True)
    class Derived:
        a: int
        b: int = field(init=False, default=0)
        c: InitVar[int] = 0

    @dataclass(frozen=True, slots=True)
    class Slotted:
        a: int

    @dataclass
    class Mutable:
        a: int

    kept: list[type[Any]] = [Posted, Keyworded, Derived, Slotted, Mutable]
    inits = [cls.__init__ for cls in kept]
    dict_init({"__name__": __name__, **{cls.__name__: cls for cls in kept}})
    assert [cls.__init__ for cls in kept] == inits
    assert Posted(1).a == 2 and Keyworded(a=1).a == 1 and Slotted(3).a == 3


def test_every_event_and_input_type_is_built_by_a_replaced_constructor() -> None:
    """The decider builds these on every input (6.4 % of its samples before, issue 15): a type
    that gains a ``__post_init__`` or a keyword-only field falls back to the slow constructor,
    and this says which."""
    classes: list[type[Any]] = [
        events.Event,
        *events.EVENT_TYPES.values(),
        *commands.INPUT_TYPES.values(),
    ]
    slow = [c.__name__ for c in classes if "__dict__" not in c.__init__.__code__.co_names]
    assert not slow, f"built by the dataclass's __setattr__ per field: {slow}"
    when = datetime(2026, 12, 5, tzinfo=UTC)
    sent = events.Event("e", "wf", 3, when, "c", "k", events.TaskRequeued("t", 2), actor="ops")
    assert pickle.loads(pickle.dumps(sent)) == sent  # noqa: S301 (replay's process pool's)
