"""Per-tenant envelope encryption on top of :mod:`common.crypto`.

``secret_encrypt`` / ``secret_decrypt`` are what other apps call. ``context``
names the owner of the value (``"threads.ThreadEnv:<thread id>:<name>"``); it
becomes associated data together with the tenant id, so a ciphertext moved to
another tenant, row or name does not decrypt.
"""

from __future__ import annotations

import threading

from django.conf import settings
from django.db import transaction

from common import crypto
from tenancy.models import Tenant

_cache_lock = threading.Lock()
_data_keys: dict[tuple[crypto.Keyring, str, bytes], bytes] = {}
_CACHE_LIMIT = 1024


def keyring() -> crypto.Keyring:
    return crypto.keyring_for(tuple(settings.PLATFORM_ENCRYPTION_KEYS))


def _wrap_aad(tenant_id: object) -> bytes:
    return f"tenant-data-key:{tenant_id}".encode()


def _value_aad(tenant: Tenant, context: str) -> bytes:
    return f"{tenant.id}\x1f{context}".encode()


def new_wrapped_data_key(tenant_id: object) -> bytes:
    """A fresh data key for a new tenant, wrapped under the newest master key."""
    return keyring().wrap(crypto.generate_key(), aad=_wrap_aad(tenant_id))


def _data_key(tenant: Tenant) -> bytes:
    """The tenant's unwrapped data key, cached per (master keys, tenant, wrapped blob)."""
    ring = keyring()
    wrapped = bytes(tenant.data_key_wrapped)
    cache_key = (ring, str(tenant.id), wrapped)
    with _cache_lock:
        cached = _data_keys.get(cache_key)
    if cached is not None:
        return cached
    key = ring.unwrap(wrapped, aad=_wrap_aad(tenant.id))
    with _cache_lock:
        if len(_data_keys) >= _CACHE_LIMIT:
            _data_keys.clear()
        _data_keys[cache_key] = key
    return key


def secret_encrypt(*, tenant: Tenant, plaintext: bytes, context: str) -> bytes:
    return crypto.seal(_data_key(tenant), plaintext, aad=_value_aad(tenant, context))


def secret_decrypt(*, tenant: Tenant, ciphertext: bytes, context: str) -> bytes:
    """Raises :class:`common.errors.DecryptionFailed` on tampering or a foreign context."""
    return crypto.unseal(_data_key(tenant), ciphertext, aad=_value_aad(tenant, context))


def tenant_keys_rotate() -> tuple[int, int]:
    """Re-wrap every tenant data key under the newest master key.

    Data keys themselves do not change, so every stored ciphertext stays
    readable. Returns ``(rewrapped, total)``. Each tenant row is locked while
    it is re-wrapped, so concurrent runs are safe.
    """
    ring = keyring()
    rewrapped = 0
    tenant_ids = list(Tenant.objects.values_list("id", flat=True))
    for tenant_id in tenant_ids:
        with transaction.atomic():
            # NO KEY: rows referencing the tenant keep committing (their FK checks).
            tenant = Tenant.objects.select_for_update(no_key=True).get(id=tenant_id)
            wrapped = bytes(tenant.data_key_wrapped)
            if not ring.needs_rewrap(wrapped):
                continue
            data_key = ring.unwrap(wrapped, aad=_wrap_aad(tenant.id))
            tenant.data_key_wrapped = ring.wrap(data_key, aad=_wrap_aad(tenant.id))
            tenant.save(update_fields=["data_key_wrapped"])
            rewrapped += 1
    return rewrapped, len(tenant_ids)
