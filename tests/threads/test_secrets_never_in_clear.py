"""Secret env values and KV values, planted through the API, never appear in clear: not in
API answers, not in any database column, not in admin pages (ARCHITECTURE §4).

KV values are not secrets by spec (runtime §14.1 item 9 makes encryption optional, and the
KV API returns them by design), but the architecture encrypts them at rest, so the database
and the admin are checked for them too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.contrib import admin
from django.contrib.auth.models import User
from django.test import Client
from django.urls import include, path
from rest_framework.test import APIClient

from tenancy.models import Role, Tenant
from tests.support import database_text
from threads.api import env as env_api
from threads.api import values as values_api
from threads.models import TenantEnv, Thread, ThreadEnv, ThreadValue

urlpatterns = [
    path("admin/", admin.site.urls),
    path(
        "api/v1/threads/<uuid:thread_id>/",
        include([*values_api.urlpatterns, *env_api.urlpatterns]),
    ),
    path("api/v1/", include(env_api.tenant_urlpatterns)),
]

pytestmark = pytest.mark.django_db

THREAD_SECRET = "sentinel-thread-secret-7f3a9c41"
TENANT_SECRET = "sentinel-tenant-secret-b81d0e55"
KV_VALUE = "sentinel-kv-value-2c6e9f10"
TEXT_VALUE = "sentinel-text-env-44aa01"  # type text: still a value, never shown either
PLANTED = [THREAD_SECRET, TENANT_SECRET, KV_VALUE, TEXT_VALUE]
ENV_PLANTED = [THREAD_SECRET, TENANT_SECRET, TEXT_VALUE]


@pytest.fixture(autouse=True)
def _routes(settings: Any) -> None:
    settings.ROOT_URLCONF = __name__


@pytest.fixture
def planted(tenant: Tenant, thread: Thread, client_for: Callable[..., APIClient]) -> list[bytes]:
    """Plant every value through the API; returns the env write responses' bodies."""
    admin_api = client_for(tenant, Role.ADMIN)
    base = f"/api/v1/threads/{thread.id}"
    writes = [
        admin_api.put(f"{base}/env/API_TOKEN", {"value": THREAD_SECRET}, format="json"),
        admin_api.put(f"{base}/env/REGION", {"value": TEXT_VALUE, "type": "text"}, format="json"),
        admin_api.put("/api/v1/env/ORG_TOKEN", {"value": TENANT_SECRET}, format="json"),
        admin_api.put(f"{base}/kv/plan", {"value": {"note": KV_VALUE}}, format="json"),
    ]
    assert [w.status_code for w in writes] == [200, 200, 200, 200]
    assert ThreadEnv.objects.filter(thread=thread).count() == 2
    assert TenantEnv.objects.filter(tenant=tenant).count() == 1
    assert ThreadValue.objects.filter(thread=thread).count() == 1
    return [w.content for w in writes[:3]]


def test_env_answers_never_carry_values(
    planted: list[bytes], tenant: Tenant, thread: Thread, client_for: Callable[..., APIClient]
) -> None:
    reader = client_for(tenant, Role.READ_ONLY)
    base = f"/api/v1/threads/{thread.id}"
    reads = [reader.get(f"{base}/env"), reader.get("/api/v1/env"), reader.get(f"{base}/kv")]
    bodies = b"\n".join([*planted, *(r.content for r in reads)])

    assert [r.status_code for r in reads] == [200, 200, 200]
    assert b"API_TOKEN" in bodies  # the names are there
    assert b"ORG_TOKEN" in bodies
    for value in ENV_PLANTED:
        assert value.encode() not in bodies


def test_no_database_column_holds_a_planted_value_in_clear_or_hex(
    planted: list[bytes], thread: Thread
) -> None:
    thread.metadata = {"control": "sentinel-visible-control"}
    thread.save(update_fields=["metadata"])
    dump = database_text()

    # Controls: the scan sees plain columns, and bytea columns as hex.
    ciphertext = bytes(ThreadEnv.objects.get(thread=thread, name="API_TOKEN").value_encrypted)
    assert "sentinel-visible-control" in dump
    assert ciphertext.hex() in dump
    for value in PLANTED:
        assert value not in dump
        assert value.encode().hex() not in dump.lower()


def test_admin_pages_never_show_a_planted_value(
    planted: list[bytes], client: Client, thread: Thread
) -> None:
    client.force_login(User.objects.create_superuser("root", password="pw-for-tests"))
    pages = [
        f"/admin/{model._meta.app_label}/{model._meta.model_name}/"
        for model in admin.site._registry
    ]
    for model in (ThreadEnv, ThreadValue, TenantEnv):
        if model in admin.site._registry:
            for row in model.objects.all():
                pages.append(f"/admin/threads/{model._meta.model_name}/{row.pk}/change/")
    pages.append(f"/admin/threads/thread/{thread.pk}/change/")
    responses = {url: client.get(url) for url in pages}

    assert {url: r.status_code for url, r in responses.items()} == dict.fromkeys(pages, 200)
    assert "/admin/threads/threadenv/" in pages
    assert "/admin/threads/threadvalue/" in pages
    assert b"API_TOKEN" in responses["/admin/threads/threadenv/"].content
    for response in responses.values():
        for value in PLANTED:
            assert value.encode() not in response.content
