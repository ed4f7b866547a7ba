"""JSON Schemas compiled to plain Python checks: the fast path of every decoder.

``compile_schema(schema)`` returns ``check(doc) -> bool``: True when ``doc`` is valid under
draft 2020-12 for the keywords below, False otherwise (never an exception). It only says yes or
no; ``SchemaCatalog`` asks jsonschema for the reason when the answer is no.

Supported keywords, with their 2020-12 meaning: ``type`` (one or a list), ``const``, ``enum``,
``properties``, ``required``, ``additionalProperties`` (a boolean or a schema), ``items`` (one
schema), ``minimum``, ``maximum``, ``exclusiveMinimum``, ``exclusiveMaximum``, ``minLength``,
``maxLength``, ``pattern``. Annotations (``title``, ``description``, ``format``, ...) assert
nothing, as in 2020-12 by default. Any other keyword (``$ref``, ``anyOf``, ...) is refused when
the schema is compiled, so a rule can never be dropped silently; those schemas stay on jsonschema.

Why not fastjsonschema: its generated code re-checks types and copies key sets per property,
two to three times slower on the records the dispatcher decodes for every task and heartbeat.
The catalogue test checks that this and jsonschema agree on every example and its mutations.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from es_sched.errors import SchemaError

Check = Callable[[Any], bool]
ANNOTATIONS = frozenset(
    {"$schema", "$id", "$comment", "title", "description", "format", "examples", "deprecated"}
)
KEYWORDS = frozenset(
    {
        "type",
        "const",
        "enum",
        "properties",
        "required",
        "additionalProperties",
        "items",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "minLength",
        "maxLength",
        "pattern",
    }
)
_TYPES = {  # JSON values decoded by json/orjson have exactly these classes
    "string": "{v}.__class__ is str",
    "integer": "({v}.__class__ is int or ({v}.__class__ is float and {v}.is_integer()))",
    "number": "({v}.__class__ is int or {v}.__class__ is float)",
    "boolean": "({v} is True or {v} is False)",
    "null": "{v} is None",
    "object": "{v}.__class__ is dict",
    "array": "{v}.__class__ is list",
}
_NOT_TYPES = {  # the same tests negated, written out so each stays one comparison
    "string": "{v}.__class__ is not str",
    "integer": "not ({v}.__class__ is int or ({v}.__class__ is float and {v}.is_integer()))",
    "number": "({v}.__class__ is not int and {v}.__class__ is not float)",
    "boolean": "({v} is not True and {v} is not False)",
    "null": "{v} is not None",
    "object": "{v}.__class__ is not dict",
    "array": "{v}.__class__ is not list",
}
_BOUNDS = {"minimum": "<", "maximum": ">", "exclusiveMinimum": "<=", "exclusiveMaximum": ">="}
_MISSING = object()


def _same(a: Any, b: Any) -> bool:
    """JSON equality: booleans are not numbers, 1 == 1.0, containers compare deeply."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict | list) or isinstance(b, dict | list):
        return False
    return bool(a == b)


class _Writer:
    def __init__(self, where: str) -> None:
        self.where = where
        self.lines: list[str] = []
        self.names: dict[str, Any] = {"_MISSING": _MISSING, "_same": _same}
        self.count = 0

    def var(self) -> str:
        self.count += 1
        return f"v{self.count}"

    def const(self, value: Any) -> str:
        name = f"C{len(self.names)}"
        self.names[name] = value
        return name

    def line(self, depth: int, text: str) -> None:
        self.lines.append("    " * depth + text)

    def node(self, s: Any, v: str, depth: int) -> None:
        if s is True:
            return
        if s is False or not isinstance(s, dict):
            raise SchemaError(f"{self.where}: only object schemas compile, got {s!r}")
        unknown = set(s) - KEYWORDS - ANNOTATIONS
        if unknown:
            raise SchemaError(f"{self.where}: keywords {sorted(unknown)} do not compile")
        types = [s["type"]] if isinstance(s.get("type"), str) else s.get("type")
        # Conditions that refuse the value, by the instance type they apply to ("" for any).
        refuse: dict[str, list[str]] = {"": []}
        if types is not None:
            one = len(types) == 1
            test = _NOT_TYPES[types[0]] if one else f"not ({' or '.join(_TYPES[t] for t in types)})"
            refuse[""].append(test.format(v=v))
        if "const" in s:
            refuse[""].append(self._differs(v, s["const"]))
        if "enum" in s:
            values = s["enum"]
            if all(isinstance(x, str) for x in values):
                allowed = self.const(frozenset(values))
                refuse[""].append(f"{v}.__class__ is not str or {v} not in {allowed}")
            else:
                refuse[""].append(f"not any(_same({v}, x) for x in {self.const(tuple(values))})")
        for k, op in _BOUNDS.items():
            if k in s:
                refuse.setdefault("number", []).append(f"{v} {op} {s[k]!r}")
        if "minLength" in s or "maxLength" in s:
            low, high = s.get("minLength", 0), s.get("maxLength")
            if low and high is not None:
                refuse.setdefault("string", []).append(f"not {low} <= len({v}) <= {high}")
            elif low:
                refuse.setdefault("string", []).append(f"len({v}) < {low}")
            elif high is not None:
                refuse.setdefault("string", []).append(f"len({v}) > {high}")
        if "pattern" in s:
            pattern = self.const(re.compile(s["pattern"]))
            refuse.setdefault("string", []).append(f"{pattern}.search({v}) is None")
        settled = types[0] if types is not None and len(types) == 1 else None
        if settled == "integer":
            settled = "number"  # every bound applies, and the type test came first
        guarded: list[tuple[str, list[str]]] = []
        for type_, tests in refuse.items():
            if type_ in ("", settled):
                refuse[""] += tests if type_ else []
            else:
                guarded.append((type_, tests))
        if refuse[""]:
            self.line(depth, f"if {' or '.join(refuse[''])}:")
            self.line(depth + 1, "return False")
        for type_, tests in guarded:
            self.line(depth, f"if {_TYPES[type_].format(v=v)} and ({' or '.join(tests)}):")
            self.line(depth + 1, "return False")
        object_settled = settled == "object"
        if {"properties", "required", "additionalProperties"} & s.keys():
            if object_settled:
                self._object(s, v, depth)
            else:
                self.line(depth, f"if {_TYPES['object'].format(v=v)}:")
                self._object(s, v, depth + 1)
                self.line(depth + 1, "pass")
        if "items" in s:
            d = depth
            if settled != "array":
                self.line(depth, f"if {_TYPES['array'].format(v=v)}:")
                d += 1
            item = self.var()
            self.line(d, f"for {item} in {v}:")
            self.node(s["items"], item, d + 1)
            self.line(d + 1, "pass")

    def _differs(self, v: str, value: Any) -> str:
        """A test that ``v`` is not the JSON value ``value``."""
        if isinstance(value, str):
            return f"{v} != {value!r}"  # no other class equals a str
        if isinstance(value, int) and not isinstance(value, bool):
            return f"({v} != {value!r} or {v} is True or {v} is False)"  # True == 1 in Python
        return f"not _same({v}, {self.const(value)})"

    def _object(self, s: dict[str, Any], v: str, depth: int) -> None:
        props: dict[str, Any] = s.get("properties", {})
        required = s.get("required", [])
        if required:
            self.line(depth, f"if not {self.const(frozenset(required))} <= {v}.keys():")
            self.line(depth + 1, "return False")
        extra = s.get("additionalProperties", True)
        if extra is False:
            self.line(depth, f"if not {v}.keys() <= {self.const(frozenset(props))}:")
            self.line(depth + 1, "return False")
        elif extra is not True and not props:
            value = self.var()
            self.line(depth, f"for {value} in {v}.values():")
            self.node(extra, value, depth + 1)
            self.line(depth + 1, "pass")
        elif extra is not True:
            key, value = self.var(), self.var()
            self.line(depth, f"for {key}, {value} in {v}.items():")
            self.line(depth + 1, f"if {key} not in {self.const(frozenset(props))}:")
            self.node(extra, value, depth + 2)
            self.line(depth + 2, "pass")
        for name, sub in props.items():
            if isinstance(sub, dict) and not set(sub) - ANNOTATIONS:
                continue  # anything goes
            value = self.var()
            if name in required:
                self.line(depth, f"{value} = {v}[{name!r}]")
                self.node(sub, value, depth)
            else:
                self.line(depth, f"{value} = {v}.get({name!r}, _MISSING)")
                self.line(depth, f"if {value} is not _MISSING:")
                self.node(sub, value, depth + 1)
                self.line(depth + 1, "pass")


def compile_schema(schema: Any, where: str = "schema") -> Check:
    """``check(doc) -> bool`` for ``schema``; ``SchemaError`` if it uses another keyword."""
    writer = _Writer(where)
    writer.node(schema, "doc", 1)
    source = "\n".join(["def check(doc):", *writer.lines, "    return True", ""])
    namespace = dict(writer.names)
    exec(compile(source, f"<compiled {where}>", "exec"), namespace)  # noqa: S102  (our own code)
    check: Check = namespace["check"]
    return check
