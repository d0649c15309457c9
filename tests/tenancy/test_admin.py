"""Admin pages: tenants get a data key, API keys show their secret once and are revoked
through the service, and tenant staff see and pick only their own tenant's rows."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib import admin
from django.contrib.auth.models import User
from django.contrib.messages import get_messages
from django.test import Client

from tenancy.admin import TenantScopedAdmin
from tenancy.encryption import secret_decrypt, secret_encrypt
from tenancy.models import ApiKey, Membership, Role, Tenant
from tenancy.services import api_key_authenticate
from tests.factories import make_api_key, make_member

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client(client: Client) -> Client:
    client.force_login(User.objects.create_superuser("root", password="pw-for-tests"))
    return client


@pytest.mark.parametrize(
    "url",
    [
        "/admin/tenancy/tenant/",
        "/admin/tenancy/tenant/add/",
        "/admin/tenancy/membership/",
        "/admin/tenancy/membership/add/",
        "/admin/tenancy/apikey/",
        "/admin/tenancy/apikey/add/",
    ],
)
def test_admin_pages_render(admin_client: Client, tenant: Tenant, url: str) -> None:
    make_api_key(tenant)

    assert admin_client.get(url).status_code == 200


def test_tenant_added_in_admin_gets_a_working_data_key(admin_client: Client) -> None:
    response = admin_client.post(
        "/admin/tenancy/tenant/add/",
        {
            "slug": "initech",
            "name": "Initech",
            "is_active": "on",
            "time_zone": "Europe/Paris",
            "tenancy_membership_set-TOTAL_FORMS": "0",
            "tenancy_membership_set-INITIAL_FORMS": "0",
        },
    )

    assert response.status_code == 302, response.content[:500]
    tenant = Tenant.objects.get(slug="initech")
    assert tenant.time_zone == "Europe/Paris"
    sealed = secret_encrypt(tenant=tenant, plaintext=b"v", context="admin-test")
    assert secret_decrypt(tenant=tenant, ciphertext=sealed, context="admin-test") == b"v"


def test_api_key_added_in_admin_shows_its_secret_once(admin_client: Client, tenant: Tenant) -> None:
    response = admin_client.post(
        "/admin/tenancy/apikey/add/",
        {"tenant": str(tenant.id), "name": "from admin", "role": "member"},
        follow=True,
    )

    texts = [str(message) for message in get_messages(response.wsgi_request)]
    shown = [m for m in texts if "not shown again" in m]
    assert len(shown) == 1
    secret = re.search(r"sap_\w{12}_[\w-]{40}", shown[0])
    assert secret is not None
    api_key = api_key_authenticate(raw_key=secret.group(0))
    assert api_key.name == "from admin"
    assert api_key.created_by is not None
    assert api_key.created_by.username == "root"
    detail = admin_client.get(f"/admin/tenancy/apikey/{api_key.id}/change/")
    assert secret.group(0) not in detail.content.decode()


def test_revoke_action_revokes_the_selected_keys(admin_client: Client, tenant: Tenant) -> None:
    issued = make_api_key(tenant)

    admin_client.post(
        "/admin/tenancy/apikey/",
        {"action": "revoke_selected", "_selected_action": [str(issued.api_key.id)]},
    )

    assert ApiKey.objects.get(id=issued.api_key.id).revoked is True


def test_membership_added_in_admin(admin_client: Client, tenant: Tenant) -> None:
    user = User.objects.create_user("someone")

    response = admin_client.post(
        "/admin/tenancy/membership/add/",
        {"tenant": str(tenant.id), "user": str(user.pk), "role": "read_only"},
    )

    assert response.status_code == 302
    assert Membership.objects.get(tenant=tenant, user=user).role == "read_only"


def test_api_key_checked_by_the_service_shows_the_error_at_its_field(
    admin_client: Client, tenant: Tenant
) -> None:
    response = admin_client.post(
        "/admin/tenancy/apikey/add/",
        {
            "tenant": str(tenant.id),
            "name": "expired at birth",
            "role": "member",
            "expires_at_0": "2000-01-01",
            "expires_at_1": "00:00:00",
        },
    )

    assert response.status_code == 200
    assert response.context["adminform"].form.errors == {
        "expires_at": ["expires_at must be in the future"]
    }
    assert not ApiKey.objects.filter(tenant=tenant).exists()


def test_api_key_pages_never_show_the_secret_hash(admin_client: Client, tenant: Tenant) -> None:
    issued = make_api_key(tenant)

    pages = [
        admin_client.get("/admin/tenancy/apikey/"),
        admin_client.get(f"/admin/tenancy/apikey/{issued.api_key.id}/change/"),
    ]

    for page in pages:
        assert page.status_code == 200
        assert issued.api_key.prefix.encode() in page.content
        assert issued.api_key.secret_hash.encode() not in page.content
        assert issued.secret.encode() not in page.content


# Tenant staff ---------------------------------------------------------------------------------


def staff(client: Client, tenant: Tenant, role: Role) -> Client:
    client.force_login(make_member(tenant, role=role, is_staff=True))
    return client


def test_tenant_staff_see_only_their_own_tenant(
    client: Client, tenant: Tenant, other_tenant: Tenant
) -> None:
    staff(client, tenant, Role.ADMIN)

    listing = client.get("/admin/tenancy/tenant/")

    assert listing.status_code == 200
    assert list(listing.context["cl"].result_list) == [tenant]
    assert client.get(f"/admin/tenancy/tenant/{tenant.id}/change/").status_code == 200
    assert client.get(f"/admin/tenancy/tenant/{other_tenant.id}/change/").status_code == 302
    assert client.get("/admin/tenancy/tenant/add/").status_code == 403


def test_tenant_admin_creates_and_revokes_keys_only_in_their_tenant(
    client: Client, tenant: Tenant, other_tenant: Tenant
) -> None:
    staff(client, tenant, Role.ADMIN)
    theirs = make_api_key(other_tenant)

    add_page = client.get("/admin/tenancy/apikey/add/")
    created = client.post(
        "/admin/tenancy/apikey/add/",
        {"tenant": str(tenant.id), "name": "staff key", "role": "read_only"},
        follow=True,
    )
    refused = client.post(
        "/admin/tenancy/apikey/add/",
        {"tenant": str(other_tenant.id), "name": "sneaky", "role": "admin"},
    )
    client.post(
        "/admin/tenancy/apikey/",
        {"action": "revoke_selected", "_selected_action": [str(theirs.api_key.id)]},
    )

    assert list(add_page.context["adminform"].form.fields["tenant"].queryset) == [tenant]
    shown = [str(m) for m in get_messages(created.wsgi_request) if "not shown again" in str(m)]
    assert len(shown) == 1
    assert ApiKey.objects.get(name="staff key").tenant == tenant
    assert refused.status_code == 200
    assert "tenant" in refused.context["adminform"].form.errors
    assert not ApiKey.objects.filter(name="sneaky").exists()
    assert ApiKey.objects.get(id=theirs.api_key.id).revoked is False
    assert client.get(f"/admin/tenancy/apikey/{theirs.api_key.id}/change/").status_code == 302


@pytest.mark.parametrize("role", [Role.READ_ONLY, Role.MEMBER])
def test_only_tenant_admins_manage_keys(client: Client, tenant: Tenant, role: Role) -> None:
    staff(client, tenant, role)
    issued = make_api_key(tenant)

    listing = client.get("/admin/tenancy/apikey/")
    client.post(
        "/admin/tenancy/apikey/",
        {"action": "revoke_selected", "_selected_action": [str(issued.api_key.id)]},
    )

    assert listing.status_code == 200
    assert listing.context["action_form"] is None  # no action this role may take
    assert client.get("/admin/tenancy/apikey/add/").status_code == 403
    assert ApiKey.objects.get(id=issued.api_key.id).revoked is False


def test_staff_without_a_membership_see_nothing(client: Client, tenant: Tenant) -> None:
    client.force_login(User.objects.create_user("lonely", is_staff=True))
    make_api_key(tenant)

    index = client.get("/admin/")

    assert index.status_code == 200
    assert index.context["app_list"] == []
    assert client.get("/admin/tenancy/apikey/").status_code == 403


def test_every_admin_of_tenant_rows_uses_the_scoped_base() -> None:
    scoped = [
        model
        for model in admin.site._registry
        if model is Tenant or any(f.name == "tenant" for f in model._meta.concrete_fields)
    ]

    assert {m.__name__ for m in scoped} >= {"Tenant", "ApiKey", "Thread", "Message", "Agent"}
    for model in scoped:
        assert isinstance(admin.site._registry[model], TenantScopedAdmin), model


def test_the_scoped_base_refuses_a_get_queryset_override() -> None:
    with pytest.raises(TypeError, match="scope_queryset"):

        class Leaky(TenantScopedAdmin[ApiKey]):
            def get_queryset(self, request: Any) -> Any:
                return ApiKey.objects.all()


def test_tenant_admin_changes_roles_only_in_their_tenant(
    client: Client, tenant: Tenant, other_tenant: Tenant
) -> None:
    staff(client, tenant, Role.ADMIN)
    colleague = make_member(tenant, role=Role.READ_ONLY)
    stranger = make_member(other_tenant, role=Role.READ_ONLY)
    mine = Membership.objects.get(user=colleague)
    theirs = Membership.objects.get(user=stranger)

    changed = client.post(f"/admin/tenancy/membership/{mine.id}/change/", {"role": "member"})
    refused = client.post(f"/admin/tenancy/membership/{theirs.id}/change/", {"role": "admin"})
    tenant_page = client.get(f"/admin/tenancy/tenant/{tenant.id}/change/")

    assert changed.status_code == 302
    assert Membership.objects.get(id=mine.id).role == "member"
    assert refused.status_code == 302
    assert refused["Location"] == "/admin/"
    assert Membership.objects.get(id=theirs.id).role == "read_only"
    assert tenant_page.status_code == 200
    assert colleague.username in tenant_page.content.decode()
    assert stranger.username not in tenant_page.content.decode()
    assert not tenant_page.context["inline_admin_formsets"][0].has_change_permission


def test_tenants_are_deactivated_not_deleted(admin_client: Client, tenant: Tenant) -> None:
    response = admin_client.post(f"/admin/tenancy/tenant/{tenant.id}/delete/", {"post": "yes"})

    assert response.status_code == 403
    assert Tenant.objects.filter(id=tenant.id).exists()
