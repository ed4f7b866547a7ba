"""File references: how media tasks pass inputs and outputs without putting bytes in events.

A reference is a ``file://`` URI (or a plain absolute path) plus its sha256 and size; every
handler output that names a file carries all three (``file_ref``). ``open_ref`` resolves an
input reference to a local path and, when a checksum came with it, verifies the file against
it. Outputs are written under a temporary name in the same folder and renamed into place, so a
reader never sees half a file and a crashed attempt leaves no final-looking output.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote, urlsplit

from es_sched.workers.sdk import HostFault, TaskFailure

CHUNK = 1024 * 1024
_HEX = re.compile(r"^[0-9a-f]{64}$")


def path_of(ref: Any, what: str = "input") -> Path:
    """The local path a ``file://`` URI or absolute path names (other schemes fail for good)."""
    if isinstance(ref, dict):  # a whole reference object: {uri, sha256, size, ...}
        ref = ref.get("uri") or ref.get("path")
    if not isinstance(ref, str) or not ref:
        raise TaskFailure(f"{what}: expected a file:// URI or a path, got {ref!r}", False)
    parts = urlsplit(ref)
    if parts.scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise TaskFailure(f"{what}: {ref} names another host", retryable=False)
        return Path(unquote(parts.path))
    if parts.scheme and len(parts.scheme) > 1:  # "C:" style drive letters are not URIs
        raise TaskFailure(f"{what}: only file:// references are supported, got {ref}", False)
    return Path(ref).expanduser().resolve()


def uri_of(path: Path) -> str:
    return "file://" + quote(str(path.resolve()))


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def file_ref(path: Path, **extra: Any) -> dict[str, Any]:
    """``{uri, path, size, sha256}`` of a finished file, plus ``extra`` properties."""
    return {
        "uri": uri_of(path),
        "path": str(path.resolve()),
        "size": path.stat().st_size,
        "sha256": sha256_of(path),
        **extra,
    }


def normalise_checksum(checksum: Any) -> str | None:
    """``"sha256:<hex>"`` or ``"<hex>"`` -> lower-case hex; None when absent."""
    if checksum in (None, ""):
        return None
    text = str(checksum).strip().lower()
    text = text.removeprefix("sha256:")
    if not _HEX.match(text):
        raise TaskFailure(f"checksum {checksum!r} is not a sha256 hex digest", retryable=False)
    return text


def open_ref(ref: Any, checksum: Any = None, what: str = "input") -> Path:
    """Resolve an input reference to an existing file, verifying its checksum when given."""
    path = path_of(ref, what)
    if isinstance(ref, dict) and checksum is None:
        checksum = ref.get("sha256")
    if not path.is_file():
        raise TaskFailure(f"{what}: {path} does not exist or is not a file", retryable=False)
    expected = normalise_checksum(checksum)
    if expected is not None:
        actual = sha256_of(path)
        if actual != expected:
            raise TaskFailure(
                f"{what}: {path} has sha256 {actual}, not the {expected} it was passed with",
                retryable=False,
            )
    return path


def part_path(final: Path) -> Path:
    """The temporary name an output is written under: ``<dir>/.<stem>.part<suffix>``."""
    return final.with_name(f".{final.stem}.part{final.suffix}")


# A volume full, read-only or failing is this host's fault, whatever the task asked (ADR 58).
HOST_ERRNOS = frozenset({errno.ENOSPC, errno.EROFS, errno.EIO, errno.EDQUOT})


def host_fault_of(exc: OSError, what: str) -> HostFault | None:
    """``HostFault`` for an error of the host's storage; None for another (left retryable)."""
    return HostFault(f"{what}: {exc}") if exc.errno in HOST_ERRNOS else None


def write_atomically(final: Path, data: bytes) -> None:
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = part_path(final)
        with tmp.open("wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, final)
    except OSError as exc:
        fault = host_fault_of(exc, f"writing {final}")
        if fault is None:
            raise
        raise fault from exc


def canonical_json(doc: Any) -> bytes:
    """The bytes that are hashed and signed: sorted keys, no spaces, UTF-8."""
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def safe_name(text: str) -> str:
    """A file-name-safe version of an id or rendition name."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("._")
    return cleaned or "out"
