"""Lease tokens sealed to their worker (ADR 74): only the worker an assignment names can read
its token, so no other reader of the assignment partition can echo it in a forged report.

- ``LeaseKey``: a worker's X25519 key pair, made when the worker process starts and kept only
  in its memory; its public half travels in every ``WorkerStatus`` (``lease_key``).
- ``Sealer``: the dispatcher's side, with a key pair of its own made at start. ``seal(token,
  worker key)`` is what it writes in ``Assignment.lease_token``: ``sealed:<dispatcher public
  key>:<base64 of nonce + ciphertext>``, a NaCl box (X25519, XSalsa20-Poly1305) between the two
  keys, so only that worker (and the dispatcher) can open it.
- ``opened(assignment, key)``: the assignment as the worker uses it, its token in clear;
  ``SealError`` when the key cannot open it (sealed to another worker, or to this worker's
  previous process). A token not sealed passes through unchanged (a dispatcher told to hand
  clear tokens to workers without a key, ``ES_SCHED_DISPATCH_CLEAR_LEASE_TOKENS``).

Why a box between two long-lived keys rather than an anonymous sealed box: the key agreement
(an X25519 scalar multiplication) is done once per worker key on the dispatcher and once per
dispatcher key on the worker, and cached; each token then costs one symmetric encryption,
where a sealed box makes a new ephemeral key and agreement per token, a cost of the order of
the rest of a grant (``bench/lease_seal.py``, ADR 74). Nothing needs distributing
beforehand: the worker's key rides on the heartbeat the dispatcher reads anyway, the
dispatcher's on each assignment.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
from collections import OrderedDict
from dataclasses import dataclass

from nacl.exceptions import CryptoError
from nacl.public import Box, PrivateKey, PublicKey

from es_sched.errors import SchemaError
from es_sched.serialization import wire

SEALED = "sealed:"
KEY_BYTES = 32  # X25519
DISPATCHER_KEYS_KEPT = 64  # a worker's boxes: one per dispatcher process it heard from lately


class SealError(SchemaError):
    """A sealed lease token this worker's key cannot open, or a public key that is no X25519
    key: the assignment is not this process's to run."""


@dataclass(frozen=True)
class Published:
    """A public key as it was published (``text``, base64) and parsed once."""

    text: str
    key: PublicKey


def public_key(text: str) -> Published:
    """A published key, checked: 32 bytes of base64 (the schema checks the shape, this the
    length, as what a worker publishes is input from outside the dispatcher)."""
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise SealError(f"lease key is not base64: {exc}") from exc
    if len(raw) != KEY_BYTES:
        raise SealError(f"lease key has {len(raw)} bytes, an X25519 key {KEY_BYTES}")
    return Published(text, PublicKey(raw))


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


class LeaseKey:
    """A worker's key pair: the private half never leaves this object (no ``__repr__`` shows
    it, nothing writes it anywhere)."""

    def __init__(self, private: PrivateKey | None = None) -> None:
        self._private = private or PrivateKey.generate()
        self.public = _b64(bytes(self._private.public_key))
        self._boxes: OrderedDict[str, Box] = OrderedDict()  # dispatcher key -> box

    def __repr__(self) -> str:
        return f"LeaseKey(public={self.public})"

    def open(self, token: str) -> str:
        """The clear token of ``token``; unchanged when it was not sealed."""
        if not token.startswith(SEALED):
            return token
        try:
            sender, _, sealed = token[len(SEALED) :].partition(":")
            box = self._boxes.get(sender)
            if box is None:
                box = self._boxes[sender] = Box(self._private, public_key(sender).key)
                while len(self._boxes) > DISPATCHER_KEYS_KEPT:
                    self._boxes.popitem(last=False)
            self._boxes.move_to_end(sender)
            return box.decrypt(base64.b64decode(sealed, validate=True)).decode()
        except (CryptoError, binascii.Error, UnicodeDecodeError, ValueError, SealError) as exc:
            raise SealError(
                "the lease token is sealed to another key (another worker's, or this "
                f"worker's previous process's): {type(exc).__name__}"
            ) from exc


class Sealer:
    """The dispatcher's key pair and a box per worker key it seals to (``forget`` one that is
    no longer any live worker's)."""

    def __init__(self, private: PrivateKey | None = None) -> None:
        self._private = private or PrivateKey.generate()
        self.public = _b64(bytes(self._private.public_key))
        self._boxes: dict[str, Box] = {}  # worker key -> box

    def __repr__(self) -> str:
        return f"Sealer(public={self.public})"

    def seal(self, token: str, key: str) -> str:
        """``token`` readable only by the holder of the private half of ``key`` (as published;
        ``SealError`` if it is no key)."""
        box = self._boxes.get(key)
        if box is None:
            box = self._boxes[key] = Box(self._private, public_key(key).key)
        return f"{SEALED}{self.public}:{_b64(bytes(box.encrypt(token.encode())))}"

    def forget(self, key: str | None) -> None:
        if key:
            self._boxes.pop(key, None)


def is_sealed(token: str) -> bool:
    return token.startswith(SEALED)


def opened(a: wire.Assignment, key: LeaseKey) -> wire.Assignment:
    """``a`` with its token in clear, as every report echoes it; ``SealError`` if not ours."""
    if not is_sealed(a.lease_token):
        return a
    return dataclasses.replace(a, lease_token=key.open(a.lease_token))
