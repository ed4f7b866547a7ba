"""Definition files on disk: JSON or YAML, one document, a list, or YAML multi-document.

A document with ``tasks`` is a workflow definition; any other object with a ``name`` is a
Conductor TaskDef. Errors name the file.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from es_sched.errors import SchemaError


@dataclass
class Documents:
    workflows: list[dict[str, Any]] = field(default_factory=list)
    taskdefs: list[dict[str, Any]] = field(default_factory=list)
    sources: dict[int, Path] = field(default_factory=dict)  # id(workflow doc) -> file


def read_any(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SchemaError(f"{path}: cannot read: {exc}") from None
    try:
        if path.suffix.lower() in (".yaml", ".yml"):
            docs = list(yaml.safe_load_all(text))
            return docs[0] if len(docs) == 1 else docs
        return json.loads(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise SchemaError(
            f"{path}: not valid {path.suffix.lstrip('.').upper() or 'JSON'}: {exc}"
        ) from None


def load(paths: Iterable[Path], taskdef_paths: Iterable[Path] = ()) -> Documents:
    out = Documents()
    for path in paths:
        for doc in _flatten(read_any(path), path):
            if "tasks" in doc:
                out.workflows.append(doc)
                out.sources[id(doc)] = path
            else:
                out.taskdefs.append(doc)
    for path in taskdef_paths:
        out.taskdefs += _flatten(read_any(path), path)
    return out


def _flatten(value: Any, path: Path) -> list[dict[str, Any]]:
    items = value if isinstance(value, list) else [value]
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise SchemaError(f"{path}: document {i} is not an object")
    return items
