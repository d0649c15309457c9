"""The tenancy API: /me and API key management, including role enforcement."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from rest_framework.test import APIClient

from common.time import now_us, to_us
from tenancy.models import ApiKey, Role, Tenant
from tests.answers import assert_answers, pages
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


def test_list_pages_newest_first_and_holds_only_the_callers_tenant(
    tenant: Tenant, other_tenant: Tenant, client_for: Callable[..., APIClient]
) -> None:
    admin = client_for(tenant, Role.ADMIN)
    for name in ("second", "third"):
        make_api_key(tenant, name=name)
    make_api_key(other_tenant, name="foreign")

    walked = pages(admin, f"{KEYS}?limit=2")
    back = admin.get(walked[-1]["previous"]).json()

    assert [[key["name"] for key in page["results"]] for page in walked] == [
        ["third", "second"], ["test key"],
    ]  # fmt: skip
    assert [key["name"] for key in back["results"]] == ["third", "second"]
    assert_answers("PaginatedApiKeyList", walked[0])
    assert admin.get(f"{KEYS}?limit=501").json()["error"]["field"] == "limit"
    assert admin.get(f"{KEYS}?cursor=x").json()["error"]["field"] == "cursor"


def test_answers_give_times_in_microseconds(
    tenant: Tenant, client_for: Callable[..., APIClient]
) -> None:
    admin = client_for(tenant, Role.ADMIN)

    created = admin.post(KEYS, {"name": "ci"}, format="json").json()
    revoked = admin.post(f"{KEYS}/{created['id']}/revoke").json()

    assert_answers("ApiKeyCreated", created)
    assert_answers("ApiKey", revoked)
    assert_answers("Me", admin.get("/api/v1/me").json())
    assert abs(created["created_at"] - now_us()) < 60_000_000
    assert (created["expires_at"], created["revoked_at"], created["last_used_at"]) == (
        None, None, None,
    )  # fmt: skip
    assert created["created_at"] <= revoked["revoked_at"] <= now_us()


@pytest.mark.parametrize(
    ("expires_at", "answered"),
    [
        ("2100-01-02T03:04:05.000006Z", 4_102_542_245_000_006),
        ("2100-01-02T04:04:05.000006+01:00", 4_102_542_245_000_006),
        ("2100-01-02T03:04:05.000006", 4_102_542_245_000_006),  # no zone: UTC
        (4_102_542_245_000_006, 4_102_542_245_000_006),
    ],
)
def test_expiry_is_an_iso_datetime_or_microseconds(
    tenant: Tenant, client_for: Callable[..., APIClient], expires_at: object, answered: int
) -> None:
    response = client_for(tenant, Role.ADMIN).post(
        KEYS, {"name": "ci", "expires_at": expires_at}, format="json"
    )

    assert response.status_code == 201, response.json()
    assert response.json()["expires_at"] == answered
    stored = ApiKey.objects.get(id=response.json()["id"]).expires_at
    assert stored is not None
    assert to_us(stored) == answered


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
        ({"name": "x", "expires_at": 978_307_200_000_000}, "expires_at"),  # 2001: past
        ({"name": "x", "expires_at": 2**70}, "expires_at"),
        ({"name": "x", "expires_at": 1.5}, "expires_at"),
        ({"name": "x", "expires_at": True}, "expires_at"),
        ({"name": "   "}, "name"),
    ],
)
def test_bad_key_input_is_400_naming_the_field(
    tenant: Tenant, client_for: Callable[..., APIClient], payload: dict[str, object], field: str
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
