"""The tenancy API: /me and API key management, including role enforcement."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from rest_framework.test import APIClient

from tenancy.models import ApiKey, Role, Tenant
from tests.factories import make_api_key

pytestmark = pytest.mark.django_db

KEYS = "/api/v1/api-keys"


def test_admin_creates_a_key_whose_secret_is_shown_once(
    tenant: Tenant, client_for: Callable[..., APIClient]
) -> None:
    admin = client_for(tenant, Role.ADMIN)

    created = admin.post(KEYS, {"name": "ci", "role": "read_only"}, format="json")
    listed = admin.get(KEYS)
    fetched = admin.get(f"{KEYS}/{created.json()['id']}")

    assert created.status_code == 201
    secret = created.json()["key"]
    assert secret.startswith(created.json()["prefix"])
    assert created.json()["role"] == "read_only"
    assert all("key" not in item for item in listed.json()["results"])
    assert "key" not in fetched.json()
    assert secret not in listed.content.decode() + fetched.content.decode()
    assert ApiKey.objects.get(id=created.json()["id"]).secret_hash != secret
    me = APIClient()
    me.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    assert me.get("/api/v1/me").json()["role"] == "read_only"


def test_list_is_paginated_and_holds_only_the_callers_tenant(
    tenant: Tenant, other_tenant: Tenant, client_for: Callable[..., APIClient]
) -> None:
    admin = client_for(tenant, Role.ADMIN)
    make_api_key(tenant, name="second")
    make_api_key(other_tenant, name="foreign")

    body = admin.get(KEYS, {"limit": 1}).json()

    assert body["count"] == 2
    assert len(body["results"]) == 1
    assert body["next"] is not None
    names = {item["name"] for item in admin.get(KEYS).json()["results"]}
    assert names == {"test key", "second"}


def test_revoke_stops_the_key_working(tenant: Tenant, client_for: Callable[..., APIClient]) -> None:
    admin = client_for(tenant, Role.ADMIN)
    victim = make_api_key(tenant, role=Role.MEMBER)

    response = admin.post(f"{KEYS}/{victim.api_key.id}/revoke")

    assert response.status_code == 200
    assert response.json()["revoked"] is True
    assert response.json()["revoked_at"] is not None
    revoked = APIClient()
    revoked.credentials(HTTP_AUTHORIZATION=f"Bearer {victim.secret}")
    assert revoked.get("/api/v1/me").status_code == 401


def test_routes_answer_with_and_without_trailing_slash(
    tenant: Tenant, client_for: Callable[..., APIClient]
) -> None:
    admin = client_for(tenant, Role.ADMIN)

    assert admin.get("/api/v1/me").status_code == 200
    assert admin.get("/api/v1/me/").status_code == 200
    assert admin.get(KEYS).status_code == 200
    assert admin.get(f"{KEYS}/").status_code == 200


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({}, "name"),
        ({"name": "x", "role": "owner"}, "role"),
        ({"name": "x", "expires_at": "yesterday"}, "expires_at"),
        ({"name": "x", "expires_at": "2001-01-01T00:00:00Z"}, "expires_at"),
        ({"name": "   "}, "name"),
    ],
)
def test_bad_key_input_is_400_naming_the_field(
    tenant: Tenant, client_for: Callable[..., APIClient], payload: dict[str, str], field: str
) -> None:
    response = client_for(tenant, Role.ADMIN).post(KEYS, payload, format="json")

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid"
    assert response.json()["error"]["field"] == field
    assert field in response.json()["error"]["message"]


def test_read_only_key_cannot_write(tenant: Tenant, client_for: Callable[..., APIClient]) -> None:
    reader = client_for(tenant, Role.READ_ONLY)

    assert reader.get("/api/v1/me").status_code == 200
    response = reader.post(KEYS, {"name": "sneaky"}, format="json")

    assert response.status_code == 403
    assert response.json()["error"]["code"] == "forbidden"
    assert "read_only" in response.json()["error"]["message"]
    assert not ApiKey.objects.filter(name="sneaky").exists()


@pytest.mark.parametrize("role", [Role.MEMBER, Role.READ_ONLY])
def test_only_admins_manage_keys(
    tenant: Tenant, client_for: Callable[..., APIClient], role: Role
) -> None:
    client = client_for(tenant, role)
    victim = make_api_key(tenant)

    assert client.get(KEYS).status_code == 403
    assert client.post(KEYS, {"name": "x"}, format="json").status_code == 403
    assert client.post(f"{KEYS}/{victim.api_key.id}/revoke").status_code == 403
    assert ApiKey.objects.get(id=victim.api_key.id).revoked is False


def test_unsupported_method_is_json_405(
    tenant: Tenant, client_for: Callable[..., APIClient]
) -> None:
    response = client_for(tenant, Role.ADMIN).delete("/api/v1/me")

    assert response.status_code == 405
    assert response.json()["error"]["code"] == "method_not_allowed"
