"""API key and session authentication over HTTP: every failure is a JSON 401, never a 500."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from common.time import now
from common.tokens import token_bump
from tenancy import services
from tenancy.models import ApiKey, Role, Tenant
from tenancy.services import LAST_USED_RESOLUTION, api_key_revoke, membership_set
from tests.factories import make_api_key, make_member

pytestmark = pytest.mark.django_db

ME = "/api/v1/me"


def _get_me(authorization: str | None) -> tuple[int, dict[str, object], dict[str, str]]:
    client = APIClient()
    if authorization is not None:
        client.credentials(HTTP_AUTHORIZATION=authorization)
    response = client.get(ME)
    return response.status_code, response.json(), dict(response.headers)


def test_valid_key_identifies_its_tenant_and_role(tenant: Tenant) -> None:
    issued = make_api_key(tenant, role=Role.MEMBER)

    status, body, _ = _get_me(f"Bearer {issued.secret}")

    assert status == 200
    assert body == {
        "tenant": {"id": str(tenant.id), "slug": "acme", "name": "acme"},
        "role": "member",
        "kind": "api_key",
        "api_key_id": str(issued.api_key.id),
        "user": None,
    }


def test_bearer_scheme_is_case_insensitive(tenant: Tenant) -> None:
    status, _, _ = _get_me(f"bearer {make_api_key(tenant).secret}")
    assert status == 200


def test_wrong_secret_is_401_invalid(tenant: Tenant) -> None:
    secret = make_api_key(tenant).secret
    forged = secret[:-4] + ("aaaa" if not secret.endswith("aaaa") else "bbbb")

    status, body, headers = _get_me(f"Bearer {forged}")

    assert status == 401
    assert body == {"error": {"code": "invalid_api_key", "message": "API key is not valid"}}
    assert headers["WWW-Authenticate"] == 'Bearer realm="api"'


def test_unknown_prefix_is_indistinguishable_from_wrong_secret(tenant: Tenant) -> None:
    secret = make_api_key(tenant).secret
    unknown = "sap_zzzzzzzzzzzz_" + secret.split("_", 2)[2]

    status, body, _ = _get_me(f"Bearer {unknown}")

    assert status == 401
    assert body["error"] == {"code": "invalid_api_key", "message": "API key is not valid"}


def test_revoked_key_is_401(tenant: Tenant) -> None:
    issued = make_api_key(tenant)
    api_key_revoke(tenant=tenant, api_key_id=issued.api_key.id)

    status, body, _ = _get_me(f"Bearer {issued.secret}")

    assert status == 401
    assert body["error"]["code"] == "revoked_api_key"  # type: ignore[index]


def test_expired_key_is_401(tenant: Tenant) -> None:
    issued = make_api_key(tenant, expires_at=now() + dt.timedelta(hours=1))
    ApiKey.objects.filter(id=issued.api_key.id).update(expires_at=now() - dt.timedelta(seconds=1))

    status, body, _ = _get_me(f"Bearer {issued.secret}")

    assert status == 401
    assert body["error"]["code"] == "expired_api_key"  # type: ignore[index]


def test_key_of_deactivated_tenant_is_401(tenant: Tenant) -> None:
    issued = make_api_key(tenant)
    Tenant.objects.filter(id=tenant.id).update(is_active=False)

    status, body, _ = _get_me(f"Bearer {issued.secret}")

    assert status == 401
    assert body["error"]["code"] == "inactive_tenant"  # type: ignore[index]


@pytest.mark.parametrize(
    ("authorization", "code"),
    [
        ("Bearer not-a-key", "malformed_api_key"),
        ("Bearer sap_short_x", "malformed_api_key"),
        ("Bearer ", "malformed_authorization"),
        ("Bearer", "malformed_authorization"),
        ("Token sap_abcdefghijkl_" + "a" * 40, "malformed_authorization"),
        ("Basic dXNlcjpwYXNz", "malformed_authorization"),
        ("Bearer sap_abcdefghijkl_" + "a" * 40 + "\u00e9", "malformed_api_key"),
    ],
)
def test_malformed_authorization_is_json_401(authorization: str, code: str) -> None:
    status, body, headers = _get_me(authorization)

    assert status == 401
    assert body["error"]["code"] == code  # type: ignore[index]
    assert headers["Content-Type"] == "application/json"


def test_missing_header_is_json_401() -> None:
    status, body, headers = _get_me(None)

    assert status == 401
    assert body == {
        "error": {
            "code": "unauthenticated",
            "message": "Authentication credentials were not provided.",
        }
    }
    assert headers["WWW-Authenticate"] == 'Bearer realm="api"'


def test_use_records_last_used_at_at_most_once_per_resolution(
    tenant: Tenant, monkeypatch: pytest.MonkeyPatch
) -> None:
    issued = make_api_key(tenant)
    assert issued.api_key.last_used_at is None

    _get_me(f"Bearer {issued.secret}")
    first = ApiKey.objects.get(id=issued.api_key.id).last_used_at
    _get_me(f"Bearer {issued.secret}")
    second = ApiKey.objects.get(id=issued.api_key.id).last_used_at

    assert first is not None
    assert second == first
    later = first + LAST_USED_RESOLUTION
    monkeypatch.setattr(services, "now", lambda: later)
    _get_me(f"Bearer {issued.secret}")
    assert ApiKey.objects.get(id=issued.api_key.id).last_used_at == later


def test_a_known_key_costs_no_query_and_any_change_is_seen_at_once(tenant: Tenant) -> None:
    issued = make_api_key(tenant)
    assert _get_me(f"Bearer {issued.secret}")[0] == 200
    with CaptureQueriesContext(connection) as queries:
        assert _get_me(f"Bearer {issued.secret}")[0] == 200
    assert [q["sql"] for q in queries.captured_queries if "tenancy_apikey" in q["sql"]] == []
    wrong = issued.secret[:-1] + ("y" if issued.secret.endswith("x") else "x")
    assert _get_me(f"Bearer {wrong}")[1]["error"]["code"] == "invalid_api_key"  # type: ignore[index]

    api_key_revoke(tenant=tenant, api_key_id=issued.api_key.id)
    status, body, _ = _get_me(f"Bearer {issued.secret}")
    assert (status, body["error"]["code"]) == (401, "revoked_api_key")  # type: ignore[index]


def test_a_change_made_by_another_process_is_seen_at_its_next_request(tenant: Tenant) -> None:
    issued = make_api_key(tenant)
    assert _get_me(f"Bearer {issued.secret}")[0] == 200  # cached here
    # Another process deactivates the tenant: its signal moves the shared epoch only.
    Tenant.objects.filter(id=tenant.id).update(is_active=False)
    token_bump("credentials")

    status, body, _ = _get_me(f"Bearer {issued.secret}")
    assert (status, body["error"]["code"]) == (401, "inactive_tenant")  # type: ignore[index]


def test_session_user_acts_in_their_only_tenant(tenant: Tenant) -> None:
    user = make_member(tenant, role=Role.READ_ONLY)
    client = APIClient()
    client.force_login(user)

    response = client.get(ME)

    assert response.status_code == 200
    assert response.json()["tenant"]["slug"] == "acme"
    assert response.json()["role"] == "read_only"
    assert response.json()["kind"] == "user"
    assert response.json()["user"] == user.username


def test_session_user_of_several_tenants_chooses_with_header(
    tenant: Tenant, other_tenant: Tenant
) -> None:
    user = make_member(tenant, role=Role.MEMBER)
    membership_set(tenant=other_tenant, user=user, role=Role.ADMIN)
    client = APIClient()
    client.force_login(user)

    ambiguous = client.get(ME)
    chosen = client.get(ME, headers={"X-Tenant": "globex"})

    assert ambiguous.status_code == 401
    assert ambiguous.json()["error"]["code"] == "tenant_required"
    assert chosen.status_code == 200
    assert chosen.json()["tenant"]["slug"] == "globex"
    assert chosen.json()["role"] == "admin"


def test_session_user_cannot_choose_a_tenant_they_do_not_belong_to(
    tenant: Tenant, other_tenant: Tenant
) -> None:
    user = make_member(tenant)
    client = APIClient()
    client.force_login(user)

    response = client.get(ME, headers={"X-Tenant": "globex"})

    assert response.status_code == 401
    assert response.json()["error"]["code"] == "no_membership"
