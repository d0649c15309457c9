"""Envelope encryption with AES-256-GCM.

Two levels of keys:

* **Master keys** come from ``PLATFORM_ENCRYPTION_KEYS`` (a comma-separated list
  of url-safe base64 32-byte keys, newest first). The first one wraps; every one
  unwraps, so an operator rotates by prepending a new key, running
  ``manage.py rotate_keys`` and later dropping the old key.
* **Data keys** are random per tenant and stored *wrapped* (encrypted by a master
  key) on the tenant row. They encrypt the actual secrets.

Every ciphertext is bound to what it protects through AES-GCM associated data
(for a secret: tenant id, owner row and name), so a ciphertext copied onto
another row does not decrypt.

Blob layouts (all binary):

* wrapped data key: ``b"K1" | master key id (8 bytes) | nonce (12) | ciphertext+tag``
* sealed value:     ``b"S1" | nonce (12) | ciphertext+tag``
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from common.errors import DecryptionFailed

KEY_BYTES = 32
NONCE_BYTES = 12
KEY_ID_BYTES = 8
_WRAPPED = b"K1"
_SEALED = b"S1"


class KeyConfigError(ValueError):
    """``PLATFORM_ENCRYPTION_KEYS`` is empty or holds something that is not a 32-byte key."""


def generate_key() -> bytes:
    return AESGCM.generate_key(bit_length=KEY_BYTES * 8)


def encode_key(key: bytes) -> str:
    """The form ``PLATFORM_ENCRYPTION_KEYS`` takes for one key."""
    return base64.urlsafe_b64encode(key).decode()


def _key_id(key: bytes) -> bytes:
    return hashlib.sha256(b"platform-master-key:" + key).digest()[:KEY_ID_BYTES]


@dataclass(frozen=True)
class Keyring:
    """The master keys, newest first."""

    keys: tuple[bytes, ...]

    @classmethod
    def from_strings(cls, encoded: Sequence[str]) -> Keyring:
        if not encoded:
            raise KeyConfigError("PLATFORM_ENCRYPTION_KEYS holds no key")
        keys = []
        for position, item in enumerate(encoded, start=1):
            try:
                key = base64.b64decode(item.encode(), altchars=b"-_", validate=True)
            except (binascii.Error, ValueError) as error:
                raise KeyConfigError(
                    f"PLATFORM_ENCRYPTION_KEYS key #{position} is not url-safe base64"
                ) from error
            if len(key) != KEY_BYTES:
                raise KeyConfigError(
                    f"PLATFORM_ENCRYPTION_KEYS key #{position} is {len(key)} bytes; "
                    f"each key must be {KEY_BYTES} bytes"
                )
            keys.append(key)
        return cls(tuple(keys))

    @property
    def primary_id(self) -> bytes:
        return _key_id(self.keys[0])

    def wrap(self, data_key: bytes, *, aad: bytes) -> bytes:
        """Encrypt a data key under the newest master key."""
        nonce = os.urandom(NONCE_BYTES)
        sealed = AESGCM(self.keys[0]).encrypt(nonce, data_key, _WRAPPED + aad)
        return _WRAPPED + self.primary_id + nonce + sealed

    def unwrap(self, blob: bytes, *, aad: bytes) -> bytes:
        """Decrypt a wrapped data key with whichever master key wrapped it."""
        blob = bytes(blob)
        if not blob.startswith(_WRAPPED) or len(blob) < 2 + KEY_ID_BYTES + NONCE_BYTES + 16:
            raise DecryptionFailed("wrapped data key has an unknown format")
        key_id = blob[2 : 2 + KEY_ID_BYTES]
        nonce = blob[2 + KEY_ID_BYTES : 2 + KEY_ID_BYTES + NONCE_BYTES]
        sealed = blob[2 + KEY_ID_BYTES + NONCE_BYTES :]
        for key in self.keys:
            if _key_id(key) == key_id:
                try:
                    return AESGCM(key).decrypt(nonce, sealed, _WRAPPED + aad)
                except InvalidTag as error:
                    raise DecryptionFailed("wrapped data key failed authentication") from error
        raise DecryptionFailed(
            "the master key that wrapped this data key is not in PLATFORM_ENCRYPTION_KEYS"
        )

    def needs_rewrap(self, blob: bytes) -> bool:
        """True when ``blob`` was wrapped by a master key other than the newest."""
        return bytes(blob)[2 : 2 + KEY_ID_BYTES] != self.primary_id


@lru_cache(maxsize=8)
def keyring_for(encoded: tuple[str, ...]) -> Keyring:
    """Parse once per distinct configuration (settings may change under tests)."""
    return Keyring.from_strings(encoded)


def seal(data_key: bytes, plaintext: bytes, *, aad: bytes) -> bytes:
    """Encrypt ``plaintext`` under a data key, bound to ``aad``."""
    nonce = os.urandom(NONCE_BYTES)
    return _SEALED + nonce + AESGCM(data_key).encrypt(nonce, plaintext, _SEALED + aad)


def unseal(data_key: bytes, blob: bytes, *, aad: bytes) -> bytes:
    """Decrypt what :func:`seal` produced; any tampering or other ``aad`` is refused."""
    blob = bytes(blob)
    if not blob.startswith(_SEALED) or len(blob) < 2 + NONCE_BYTES + 16:
        raise DecryptionFailed("ciphertext has an unknown format")
    nonce, sealed = blob[2 : 2 + NONCE_BYTES], blob[2 + NONCE_BYTES :]
    try:
        return AESGCM(data_key).decrypt(nonce, sealed, _SEALED + aad)
    except InvalidTag as error:
        raise DecryptionFailed(
            "ciphertext failed authentication (tampered, or bound to another owner)"
        ) from error
