"""Conductor parameter expressions: ``${workflow.input.x}``, ``${ref.output.y[0].z}``, ...

A string that is exactly one expression resolves to the referenced value itself (an object
stays an object); expressions embedded in longer strings are replaced by their text. Objects and
lists are resolved recursively. A reference to something that does not exist (yet) resolves to
``None``, as in Conductor. Supported roots: ``workflow.input``, ``workflow.output``,
``workflow.variables``, ``workflow.workflowId``, ``workflow.correlationId``,
``workflow.status``, ``workflow.reasonForIncompletion``, ``workflow.workflowType``,
``workflow.version``, ``workflow.parentWorkflowId`` and ``<taskRef>.input|output|status|...``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any

EXPR = re.compile(r"\$\{([^}]+)\}")
_SEGMENT = re.compile(r"([^.\[\]]+)|\[(\d+)\]|\['([^']*)'\]|\[\"([^\"]*)\"\]")

Lookup = Callable[[str], Any]
"""Resolves the first path segment (``workflow`` or a task ref) to a JSON-like object."""


def split_path(path: str) -> list[str | int]:
    parts: list[str | int] = []
    for name, index, sq, dq in _SEGMENT.findall(path.strip()):
        if index:
            parts.append(int(index))
        else:
            parts.append(name or sq or dq)
    return parts


def walk(value: Any, parts: list[str | int]) -> Any:
    for part in parts:
        if isinstance(part, int):
            if isinstance(value, list) and -len(value) <= part < len(value):
                value = value[part]
            else:
                return None
        elif isinstance(value, Mapping):
            value = value.get(part)
        elif isinstance(value, list) and part == "length":
            value = len(value)
        else:
            return None
    return value


def evaluate(path: str, lookup: Lookup) -> Any:
    parts = split_path(path)
    if not parts or not isinstance(parts[0], str):
        return None
    return walk(lookup(parts[0]), parts[1:])


def resolve(template: Any, lookup: Lookup) -> Any:
    """Resolve every expression inside ``template`` (any JSON-like value)."""
    if isinstance(template, str):
        whole = EXPR.fullmatch(template)
        if whole:
            return evaluate(whole.group(1), lookup)
        if "${" not in template:
            return template
        return EXPR.sub(lambda m: _as_text(evaluate(m.group(1), lookup)), template)
    if isinstance(template, Mapping):
        return {k: resolve(v, lookup) for k, v in template.items()}
    if isinstance(template, list):
        return [resolve(v, lookup) for v in template]
    return template


def _as_text(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"))


def references(template: Any) -> list[str]:
    """Every expression path in ``template``, e.g. ``['workflow.input.x', 'probe.output.h']``."""
    if isinstance(template, str):
        return [m.group(1).strip() for m in EXPR.finditer(template)]
    if isinstance(template, Mapping):
        return [r for v in template.values() for r in references(v)]
    if isinstance(template, list):
        return [r for v in template for r in references(v)]
    return []
