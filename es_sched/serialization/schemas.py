"""The JSON Schema catalogue in ``schemas/``: one file per type and version.

Layout: ``schemas/events/<type>.v<N>.json``, ``schemas/commands/<type>.v<N>.json``,
``schemas/definitions/{workflow,taskdef}.v1.json`` and ``schemas/envelope.v1.json``; example
documents under ``schemas/examples/``. All are JSON Schema draft 2020-12.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import fastjsonschema
from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match

from es_sched.errors import SchemaError


def schema_dir() -> Path:
    return Path(__file__).resolve().parents[2] / "schemas"


class SchemaCatalog:
    def __init__(self, root: Path | None = None) -> None:
        self.root = root or schema_dir()
        self._validators: dict[Path, Draft202012Validator] = {}
        self._fast: dict[Path, Any] = {}
        self._paths: dict[tuple[str, str, int], Path] = {}
        self._exists: set[Path] = set()

    def path(self, kind: str, type_: str, version: int) -> Path:
        key = (kind, type_, version)
        found = self._paths.get(key)
        if found is None:  # pathlib joins cost ~15 us: once per type, not per record
            found = self._paths[key] = self.root / kind / f"{type_}.v{version}.json"
        return found

    def types(self, kind: str) -> set[str]:
        return {p.name.rsplit(".v", 1)[0] for p in (self.root / kind).glob("*.v*.json")}

    def validator(self, path: Path) -> Draft202012Validator:
        if path not in self._validators:
            schema = json.loads(path.read_text())
            Draft202012Validator.check_schema(schema)
            self._validators[path] = Draft202012Validator(schema)
        return self._validators[path]

    def validate(self, kind: str, type_: str, version: Any, doc: Any) -> None:
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            raise SchemaError(
                f"{type_}: schema_version must be a positive integer, got {version!r}"
            )
        path = self.path(kind, type_, version)
        if path not in self._exists:
            if not path.exists():
                raise SchemaError(f"{type_}: no schema for schema_version {version} ({path.name})")
            self._exists.add(path)
        try:
            self.fast(path)(doc)
        except fastjsonschema.JsonSchemaException:
            self.check(path, doc, type_)  # invalid: jsonschema explains it with its best error
            raise SchemaError(f"{type_}: does not match {path.name}") from None

    def fast(self, path: Path) -> Any:
        """A compiled validator (fastjsonschema, ~100x faster than interpreting the schema).

        Used for event and command schemas only, the hot path of every consumer. It compiles
        the document under draft-07 rules; the keywords those schemas use (type, const, enum,
        properties, required, additionalProperties, items, bounds, pattern; no ``$ref``) mean
        the same in both drafts (a catalogue test keeps it so). Definition schemas, which use
        ``$ref`` beside other keywords (ignored by draft-07), stay on jsonschema.
        """
        if path not in self._fast:
            schema = json.loads(path.read_text())
            schema["$schema"] = "http://json-schema.org/draft-07/schema#"
            self._fast[path] = fastjsonschema.compile(schema)
        return self._fast[path]

    def check(self, path: Path, doc: Any, what: str) -> None:
        error = best_match(self.validator(path).iter_errors(doc))
        if error is not None:
            where = "/".join(str(p) for p in error.absolute_path) or "(document)"
            raise SchemaError(f"{what}: {where}: {error.message}")


@cache
def default_catalog() -> SchemaCatalog:
    return SchemaCatalog()
