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
        "type", "const", "enum", "properties", "required", "additionalProperties", "items",
        "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minLength", "maxLength",
        "pattern",
    }
)  # fmt: skip
_TYPES = {  # JSON values decoded by json/orjson have exactly these classes
    "string": "{v}.__class__ is str",
    "integer": "({v}.__class__ is int or ({v}.__class__ is float and {v}.is_integer()))",
    "number": "({v}.__class__ is int or {v}.__class__ is float)",
    "boolean": "({v} is True or {v} is False)",
    "null": "{v} is None",
    "object": "{v}.__class__ is dict",
    "array": "{v}.__class__ is list",
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
        if types is not None:
            self.line(depth, f"if not ({' or '.join(_TYPES[t].format(v=v) for t in types)}):")
            self.line(depth + 1, "return False")

        def guard(type_: str) -> int:
            """Open ``if <v> is a type_`` unless the type keyword already settled it."""
            if types == [type_] or (type_ == "number" and types == ["integer"]):
                return depth
            self.line(depth, f"if {_TYPES[type_].format(v=v)}:")
            return depth + 1

        if "const" in s:
            self.line(depth, f"if not _same({v}, {self.const(s['const'])}): return False")
        if "enum" in s:
            values = s["enum"]
            if all(isinstance(x, str) for x in values):
                allowed = self.const(frozenset(values))
                self.line(depth, f"if {v}.__class__ is not str or {v} not in {allowed}:")
            else:
                self.line(depth, f"if not any(_same({v}, x) for x in {self.const(tuple(values))}):")
            self.line(depth + 1, "return False")
        bounds = [k for k in _BOUNDS if k in s]
        if bounds:
            d = guard("number")
            for k in bounds:
                self.line(d, f"if {v} {_BOUNDS[k]} {s[k]!r}: return False")
        if {"minLength", "maxLength", "pattern"} & s.keys():
            d = guard("string")
            if "minLength" in s or "maxLength" in s:
                low, high = s.get("minLength", 0), s.get("maxLength")
                test = f"{low} <= len({v})" + (f" <= {high}" if high is not None else "")
                self.line(d, f"if not {test}: return False")
            if "pattern" in s:
                pattern = self.const(re.compile(s["pattern"]))
                self.line(d, f"if {pattern}.search({v}) is None: return False")
        if {"properties", "required", "additionalProperties"} & s.keys():
            self._object(s, v, guard("object"))
        if "items" in s:
            d, item = guard("array"), self.var()
            self.line(d, f"for {item} in {v}:")
            self.node(s["items"], item, d + 1)
            self.line(d + 1, "pass")

    def _object(self, s: dict[str, Any], v: str, depth: int) -> None:
        props: dict[str, Any] = s.get("properties", {})
        required = s.get("required", [])
        if required:
            self.line(depth, f"if not {self.const(frozenset(required))} <= {v}.keys():")
            self.line(depth + 1, "return False")
        extra = s.get("additionalProperties", True)
        if extra is False:
            self.line(depth, f"if not {v}.keys() <= {self.const(frozenset(props))}: return False")
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
