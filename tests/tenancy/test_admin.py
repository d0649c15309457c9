"""Admin pages: tenants get a data key, API keys show their secret once, revocation works."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import User
from django.contrib.messages import get_messages
from django.test import Client

from tenancy.encryption import secret_decrypt, secret_encrypt
from tenancy.models import ApiKey, Membership, Tenant
from tenancy.services import api_key_authenticate
from tests.factories import make_api_key

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
            "tenancy_membership_set-TOTAL_FORMS": "0",
            "tenancy_membership_set-INITIAL_FORMS": "0",
        },
    )

    assert response.status_code == 302, response.content[:500]
    tenant = Tenant.objects.get(slug="initech")
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
