"""Lease tokens sealed to their worker (ADR 74): only the worker an assignment names can read
its token, so no other reader of the assignment partition can echo it in a forged report.

- ``LeaseKey``: a worker's X25519 key pair, made when the worker process starts and kept only
  in its memory; its public half travels in every ``WorkerStatus`` (``lease_key``).
- ``seal(token, public_key)``: what the dispatcher writes in ``Assignment.lease_token``,
  ``sealed:`` + base64 of a libsodium sealed box (an ephemeral key per seal: anonymous, and
  only the holder of the private key opens it).
- ``opened(assignment, key)``: the assignment as the worker uses it, its token in clear;
  ``SealError`` when the key cannot open it (sealed to another worker, or to this worker's
  previous process). A token not sealed passes through unchanged (a dispatcher told to hand
  clear tokens to workers without a key, ``ES_SCHED_DISPATCH_CLEAR_LEASE_TOKENS``).

Why a sealed box (PyNaCl's ``SealedBox``): the decider's fencing stays as it is (it compares
the echoed token with the one ``task.dispatched`` recorded), the cost is one seal per grant and
one open per assignment, and nothing needs distributing beforehand: the key rides on the
heartbeat the dispatcher reads anyway. See ADR 74 for the alternatives weighed.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
from dataclasses import dataclass

from nacl.exceptions import CryptoError
from nacl.public import PrivateKey, PublicKey, SealedBox

from es_sched.errors import SchemaError
from es_sched.serialization import wire

SEALED = "sealed:"
KEY_BYTES = 32  # X25519


class SealError(SchemaError):
    """A sealed lease token this worker's key cannot open, or a public key that is no X25519
    key: the assignment is not this process's to run."""


class LeaseKey:
    """A worker's key pair: the private half never leaves this object (no ``__repr__`` shows
    it, nothing writes it anywhere)."""

    def __init__(self, private: PrivateKey | None = None) -> None:
        self._private = private or PrivateKey.generate()
        self._box = SealedBox(self._private)
        self.public = base64.b64encode(bytes(self._private.public_key)).decode()

    def __repr__(self) -> str:
        return f"LeaseKey(public={self.public})"

    def open(self, token: str) -> str:
        """The clear token of ``token``; unchanged when it was not sealed."""
        if not token.startswith(SEALED):
            return token
        try:
            return self._box.decrypt(base64.b64decode(token[len(SEALED) :], validate=True)).decode()
        except (CryptoError, binascii.Error, UnicodeDecodeError, ValueError) as exc:
            raise SealError(
                "the lease token is sealed to another key (another worker's, or this "
                f"worker's previous process's): {type(exc).__name__}"
            ) from exc


@dataclass(frozen=True)
class Published:
    """A worker's public key as its status carried it (``text``) and parsed once."""

    text: str
    key: PublicKey


def public_key(text: str) -> Published:
    """A worker's published key, checked: 32 bytes of base64 (the schema checks the shape, this
    the length, as a report of a worker is input from outside the dispatcher)."""
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise SealError(f"lease key is not base64: {exc}") from exc
    if len(raw) != KEY_BYTES:
        raise SealError(f"lease key has {len(raw)} bytes, an X25519 key {KEY_BYTES}")
    return Published(text, PublicKey(raw))


def seal(token: str, key: Published) -> str:
    """``token`` readable only by the holder of ``key``'s private half."""
    return SEALED + base64.b64encode(SealedBox(key.key).encrypt(token.encode())).decode()


def is_sealed(token: str) -> bool:
    return token.startswith(SEALED)


def opened(a: wire.Assignment, key: LeaseKey) -> wire.Assignment:
    """``a`` with its token in clear, as every report echoes it; ``SealError`` if not ours."""
    if not is_sealed(a.lease_token):
        return a
    return dataclasses.replace(a, lease_token=key.open(a.lease_token))
