"""threads/services/env.py: thread and tenant env rows and their encryption."""

from __future__ import annotations

from typing import Any

import pytest

from common.errors import DecryptionFailed, LimitExceeded, ValidationFailed
from tenancy.models import Tenant
from tests.threads.conftest import make_thread
from threads.models import TenantEnv, Thread, ThreadEnv
from threads.services.env import (
    MAX_ENV_VALUE_BYTES,
    EnvValue,
    tenant_env_delete,
    tenant_env_get,
    tenant_env_names,
    tenant_env_set,
    thread_env_copy,
    thread_env_delete,
    thread_env_get,
    thread_env_names,
    thread_env_set,
)

pytestmark = pytest.mark.django_db


def test_a_new_thread_variable_is_secret_and_listed_without_its_value(thread: Thread) -> None:
    entry = thread_env_set(thread=thread, name="API_TOKEN", value="tok-123")

    listed = thread_env_names(thread=thread)

    assert (entry.name, entry.type) == ("API_TOKEN", "secret")
    assert [(e.name, e.type) for e in listed] == [("API_TOKEN", "secret")]
    assert not hasattr(listed[0], "value")
    assert thread_env_get(thread=thread, name="API_TOKEN") == EnvValue("tok-123", "secret")


def test_omitting_type_keeps_the_existing_type(thread: Thread) -> None:
    thread_env_set(thread=thread, name="REGION", value="eu", type="text")

    entry = thread_env_set(thread=thread, name="REGION", value="us")

    assert entry.type == "text"
    assert thread_env_get(thread=thread, name="REGION") == EnvValue("us", "text")


def test_an_explicit_type_changes_the_type(thread: Thread) -> None:
    thread_env_set(thread=thread, name="REGION", value="eu", type="text")

    thread_env_set(thread=thread, name="REGION", value="eu", type="secret")

    assert ThreadEnv.objects.get(thread=thread, name="REGION").type == "secret"


def test_a_blank_value_creates_a_visible_entry(thread: Thread) -> None:
    thread_env_set(thread=thread, name="TO_FILL", value="")

    assert [e.name for e in thread_env_names(thread=thread)] == ["TO_FILL"]
    assert thread_env_get(thread=thread, name="TO_FILL") == EnvValue("", "secret")


@pytest.mark.parametrize("name", ["", "1ABC", "HAS-DASH", "has space", "ÜMLAUT", None])
def test_invalid_names_are_rejected_naming_name(thread: Thread, name: Any) -> None:
    with pytest.raises(ValidationFailed) as caught:
        thread_env_set(thread=thread, name=name, value="x")

    assert caught.value.field == "name"


def test_a_name_past_128_characters_is_refused_naming_the_cap(thread: Thread) -> None:
    thread_env_set(thread=thread, name="N" * 128, value="x")

    with pytest.raises(LimitExceeded) as caught:
        thread_env_set(thread=thread, name="N" * 129, value="x")

    assert "MAX_ENV_NAME_LENGTH is 128" in caught.value.message


def test_value_size_cap_is_named(thread: Thread) -> None:
    with pytest.raises(LimitExceeded) as caught:
        thread_env_set(thread=thread, name="BIG", value="x" * (MAX_ENV_VALUE_BYTES + 1))

    assert caught.value.field == "value"
    assert f"MAX_ENV_VALUE_BYTES is {MAX_ENV_VALUE_BYTES}" in caught.value.message


@pytest.mark.parametrize(("field", "kwargs"), [("value", {"value": 5}), ("type", {"type": "x"})])
def test_bad_value_or_type_is_rejected_naming_the_field(
    thread: Thread, field: str, kwargs: dict[str, Any]
) -> None:
    with pytest.raises(ValidationFailed) as caught:
        thread_env_set(thread=thread, name="N", **({"value": "v"} | kwargs))

    assert caught.value.field == field


def test_delete_reports_whether_there_was_a_variable(thread: Thread) -> None:
    thread_env_set(thread=thread, name="A", value="1")

    assert thread_env_delete(thread=thread, name="A") is True
    assert thread_env_delete(thread=thread, name="A") is False
    assert thread_env_get(thread=thread, name="A") is None


def test_thread_env_rows_are_ciphertext_bound_to_their_name(thread: Thread) -> None:
    thread_env_set(thread=thread, name="A", value="plain-alpha")
    thread_env_set(thread=thread, name="B", value="beta")
    row = ThreadEnv.objects.get(thread=thread, name="A")

    assert b"plain-alpha" not in bytes(row.value_encrypted)
    ThreadEnv.objects.filter(thread=thread, name="B").update(value_encrypted=row.value_encrypted)
    with pytest.raises(DecryptionFailed):
        thread_env_get(thread=thread, name="B")


def test_copy_reencrypts_for_the_target_and_skips_excluded_names(thread: Thread) -> None:
    child = make_thread(thread.tenant, parent=thread)
    thread_env_set(thread=thread, name="SHARED", value="s", type="text")
    thread_env_set(thread=thread, name="SCOPED", value="parent-only")

    copied = thread_env_copy(source=thread, target=child, exclude=["SCOPED"])

    assert copied == ["SHARED"]
    assert thread_env_get(thread=child, name="SHARED") == EnvValue("s", "text")
    assert thread_env_get(thread=child, name="SCOPED") is None


def test_copy_refuses_another_tenants_thread(thread: Thread, other_thread: Thread) -> None:
    with pytest.raises(ValidationFailed):
        thread_env_copy(source=thread, target=other_thread)


def test_tenant_env_is_per_tenant(tenant: Tenant, other_tenant: Tenant) -> None:
    tenant_env_set(tenant=tenant, name="ORG_KEY", value="acme-key", type="text")
    tenant_env_set(tenant=other_tenant, name="ORG_KEY", value="globex-key")

    assert tenant_env_get(tenant=tenant, name="ORG_KEY") == EnvValue("acme-key", "text")
    assert tenant_env_get(tenant=other_tenant, name="ORG_KEY") == EnvValue("globex-key", "secret")
    assert [(e.name, e.type) for e in tenant_env_names(tenant=tenant)] == [("ORG_KEY", "text")]


def test_tenant_env_keeps_type_and_deletes(tenant: Tenant) -> None:
    tenant_env_set(tenant=tenant, name="X", value="1", type="text")
    tenant_env_set(tenant=tenant, name="X", value="2")

    assert tenant_env_get(tenant=tenant, name="X") == EnvValue("2", "text")
    assert TenantEnv.objects.get(tenant=tenant, name="X").type == "text"
    assert tenant_env_delete(tenant=tenant, name="X") is True
    assert tenant_env_get(tenant=tenant, name="X") is None
