"""The JSON Schema catalogue in ``schemas/``: one file per type and version.

Layout: ``schemas/<family>/<type>.v<N>.json`` for the families ``events``, ``commands``,
``records`` (ready, timer, retry), ``wire`` (dispatcher <-> worker), ``config`` and
``definitions``, plus ``schemas/envelope.v1.json``; one example document per schema under
``schemas/examples/`` at the same relative path. All are JSON Schema draft 2020-12.

Every schema but the definitions' is compiled to a plain Python check
(``es_sched.serialization.compiled``); the definitions use ``$ref`` and stay on jsonschema,
which also explains every refusal.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any, NoReturn

from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match

from es_sched.errors import SchemaError
from es_sched.serialization.compiled import Check, compile_schema


def schema_dir() -> Path:
    return Path(__file__).resolve().parents[2] / "schemas"


class SchemaCatalog:
    def __init__(self, root: Path | None = None) -> None:
        self.root = root or schema_dir()
        self._validators: dict[Path, Draft202012Validator] = {}
        self._fast: dict[Path, Check] = {}
        self._paths: dict[tuple[str, str, int], Path] = {}
        self._exists: set[Path] = set()

    def path(self, kind: str, type_: str, version: int) -> Path:
        key = (kind, type_, version)
        found = self._paths.get(key)
        if found is None:  # a pathlib join is dear next to a check: once per type, not per record
            found = self._paths[key] = self.root / kind / f"{type_}.v{version}.json"
        return found

    def types(self, kind: str) -> set[str]:
        return {p.name.rsplit(".v", 1)[0] for p in (self.root / kind).glob("*.v*.json")}

    def validator(self, path: Path) -> Draft202012Validator:
        """jsonschema's validator of a schema file: the reasons, and ``$ref`` schemas."""
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
        if not self.fast(path)(doc):
            self.refuse(path, doc, type_)

    def compiled(self, kind: str, type_: str, version: int = 1) -> Compiled:
        """The compiled check of one schema, for decoders on a hot path (no lookups per call)."""
        path = self.path(kind, type_, version)
        if not path.exists():
            raise SchemaError(f"{type_}: no schema {kind}/{path.name}")
        return Compiled(self, path, type_)

    def fast(self, path: Path) -> Check:
        """The compiled check of a schema file (``compiled.compile_schema``), made once."""
        found = self._fast.get(path)
        if found is None:
            schema = json.loads(path.read_text())
            found = self._fast[path] = compile_schema(schema, path.name)
        return found

    def refuse(self, path: Path, doc: Any, what: str) -> NoReturn:
        """Raise the ``SchemaError`` for a document the compiled check refused."""
        self.check(path, doc, what)  # jsonschema explains it with its best error
        raise SchemaError(f"{what}: does not match {path.name}")

    def check(self, path: Path, doc: Any, what: str) -> None:
        error = best_match(self.validator(path).iter_errors(doc))
        if error is not None:
            where = "/".join(str(p) for p in error.absolute_path) or "(document)"
            raise SchemaError(f"{what}: {where}: {error.message}")


class Compiled:
    """One compiled schema: ``ok(doc)`` answers fast, ``require(doc)`` raises with the reason."""

    __slots__ = ("catalog", "ok", "path", "what")

    def __init__(self, catalog: SchemaCatalog, path: Path, what: str) -> None:
        self.catalog, self.path, self.what = catalog, path, what
        self.ok: Check = catalog.fast(path)

    def require(self, doc: Any) -> None:
        if not self.ok(doc):
            self.catalog.refuse(self.path, doc, self.what)


@cache
def default_catalog() -> SchemaCatalog:
    return SchemaCatalog()
