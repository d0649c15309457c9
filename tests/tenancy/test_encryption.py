"""Per-tenant envelope encryption, key rotation and the rotate_keys command."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command
from pytest_django.fixtures import Settings

from common.crypto import encode_key, generate_key
from common.errors import DecryptionFailed
from tenancy.encryption import secret_decrypt, secret_encrypt
from tenancy.models import Tenant
from tests.factories import make_tenant

pytestmark = pytest.mark.django_db

CONTEXT = "threads.ThreadEnv:thread-1:OPENAI_API_KEY"


def test_round_trip(tenant: Tenant) -> None:
    sealed = secret_encrypt(tenant=tenant, plaintext=b"sk-live-123", context=CONTEXT)

    assert b"sk-live-123" not in sealed
    assert secret_decrypt(tenant=tenant, ciphertext=sealed, context=CONTEXT) == b"sk-live-123"


def test_each_tenant_has_its_own_data_key(tenant: Tenant, other_tenant: Tenant) -> None:
    assert bytes(tenant.data_key_wrapped) != bytes(other_tenant.data_key_wrapped)
    sealed = secret_encrypt(tenant=tenant, plaintext=b"secret", context=CONTEXT)

    with pytest.raises(DecryptionFailed):
        secret_decrypt(tenant=other_tenant, ciphertext=sealed, context=CONTEXT)


def test_tampered_ciphertext_is_refused(tenant: Tenant) -> None:
    sealed = bytearray(secret_encrypt(tenant=tenant, plaintext=b"secret", context=CONTEXT))
    sealed[-1] ^= 0x01

    with pytest.raises(DecryptionFailed, match="failed authentication"):
        secret_decrypt(tenant=tenant, ciphertext=bytes(sealed), context=CONTEXT)


def test_ciphertext_swapped_to_another_owner_is_refused(tenant: Tenant) -> None:
    sealed = secret_encrypt(tenant=tenant, plaintext=b"secret", context=CONTEXT)

    with pytest.raises(DecryptionFailed):
        secret_decrypt(
            tenant=tenant, ciphertext=sealed, context="threads.ThreadEnv:thread-2:OPENAI_API_KEY"
        )


def test_rotation_rewraps_every_tenant_and_keeps_old_rows_readable(settings: Settings) -> None:
    old_key, new_key = encode_key(generate_key()), encode_key(generate_key())
    settings.PLATFORM_ENCRYPTION_KEYS = [old_key]
    tenants = [make_tenant(), make_tenant()]
    sealed = [secret_encrypt(tenant=t, plaintext=b"before", context=CONTEXT) for t in tenants]

    settings.PLATFORM_ENCRYPTION_KEYS = [new_key, old_key]
    output = StringIO()
    call_command("rotate_keys", stdout=output)
    settings.PLATFORM_ENCRYPTION_KEYS = [new_key]  # the old master key is gone

    assert f"Re-wrapped 2 of {Tenant.objects.count()} tenant data keys." in output.getvalue()
    for tenant, ciphertext in zip(tenants, sealed, strict=True):
        fresh = Tenant.objects.get(id=tenant.id)
        assert secret_decrypt(tenant=fresh, ciphertext=ciphertext, context=CONTEXT) == b"before"


def test_rotation_is_idempotent(settings: Settings) -> None:
    settings.PLATFORM_ENCRYPTION_KEYS = [encode_key(generate_key())]
    make_tenant()
    call_command("rotate_keys", stdout=StringIO())
    output = StringIO()

    call_command("rotate_keys", stdout=output)

    assert output.getvalue().startswith("Re-wrapped 0 of")


def test_without_the_wrapping_master_key_decryption_fails_clearly(settings: Settings) -> None:
    settings.PLATFORM_ENCRYPTION_KEYS = [encode_key(generate_key())]
    tenant = make_tenant()
    sealed = secret_encrypt(tenant=tenant, plaintext=b"x", context=CONTEXT)
    settings.PLATFORM_ENCRYPTION_KEYS = [encode_key(generate_key())]

    with pytest.raises(DecryptionFailed, match="PLATFORM_ENCRYPTION_KEYS"):
        secret_decrypt(tenant=Tenant.objects.get(id=tenant.id), ciphertext=sealed, context=CONTEXT)
