"""A tenant's permission rules over REST: admins write them, members read them, every
field is checked, and each change reaches flows at once (the definitions version moves)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from rest_framework.test import APIClient

from agents.permission_rules import tenant_rules_load
from agents.selectors import definitions_version
from common.time import now_us
from tenancy.models import Role, Tenant
from tests.answers import assert_answers, pages

pytestmark = pytest.mark.django_db

ABOVE_100 = {">": [{"var": "amount"}, 100]}


@pytest.fixture
def admin(tenant: Tenant, client_for: Callable[..., APIClient]) -> APIClient:
    return client_for(tenant, Role.ADMIN)


def test_an_admin_creates_reads_changes_and_deletes_a_rule(
    tenant: Tenant, admin: APIClient, member: APIClient
) -> None:
    before = definitions_version(tenant=tenant)
    created = admin.post(
        "/api/v1/permission-rules",
        {"agent": "helper", "tool": "refund", "decision": "deny", "when": ABOVE_100},
        format="json",
    )
    rule_id = created.json()["id"]
    read = member.get(f"/api/v1/permission-rules/{rule_id}")
    patched = admin.patch(
        f"/api/v1/permission-rules/{rule_id}", {"description": "big refunds"}, format="json"
    )
    listed = member.get("/api/v1/permission-rules")

    assert created.status_code == 201, created.json()
    assert read.json() == created.json()
    assert patched.json()["description"] == "big refunds"
    assert (patched.json()["when"], patched.json()["tool"]) == (ABOVE_100, "refund")
    assert [item["id"] for item in listed.json()["results"]] == [rule_id]
    assert definitions_version(tenant=tenant) != before  # flows read the new rules
    (loaded,) = tenant_rules_load(tenant=tenant)
    assert (loaded.agent, loaded.tool, loaded.rule.decision, loaded.rule.id) == (
        "helper", "refund", "deny", rule_id,
    )  # fmt: skip

    assert admin.delete(f"/api/v1/permission-rules/{rule_id}").status_code == 204
    assert member.get(f"/api/v1/permission-rules/{rule_id}").status_code == 404
    assert tenant_rules_load(tenant=tenant) == ()


def test_a_member_may_read_but_not_write_rules(member: APIClient) -> None:
    response = member.post("/api/v1/permission-rules", {"decision": "deny"}, format="json")

    assert response.status_code == 403


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"decision": "ask", "on_expiry": "later"}, "on_expiry"),
        ({"decision": "allow", "expires_in": 60}, "expires_in"),
        ({"decision": "ask", "expires_in": "soon"}, "expires_in"),
        ({"decision": "maybe"}, "decision"),
        ({}, "decision"),
        ({"decision": "deny", "tool": "Refund"}, "tool"),
        ({"decision": "deny", "agent": 5}, "agent"),
        ({"decision": "deny", "when": {"gt": [1, 2]}}, "when.gt"),
        ({"decision": "deny", "description": "x" * 501}, "description"),
        ({"decision": "deny", "priority": 1}, "priority"),
    ],
)
def test_a_bad_rule_is_a_400_naming_the_field(
    admin: APIClient, body: dict[str, object], field: str
) -> None:
    response = admin.post("/api/v1/permission-rules", body, format="json")

    assert response.status_code == 400, response.json()
    assert response.json()["error"]["field"] == field


def test_a_malformed_rule_id_is_a_404(admin: APIClient) -> None:
    for rule_id in ("not-a-rule", "zzzzzzzz-zzzz-zzzz-zzzz-zzzzzzzzzzzz", "0" * 36):
        assert admin.get(f"/api/v1/permission-rules/{rule_id}").status_code == 404


def test_an_ask_rule_keeps_its_expiry_until_it_no_longer_asks(admin: APIClient) -> None:
    created = admin.post(
        "/api/v1/permission-rules",
        {"tool": "refund", "decision": "ask", "expires_in": 600, "on_expiry": "allow"},
        format="json",
    ).json()
    rule_id = created["id"]

    described = admin.patch(
        f"/api/v1/permission-rules/{rule_id}", {"description": "x"}, format="json"
    ).json()
    denied = admin.patch(
        f"/api/v1/permission-rules/{rule_id}", {"decision": "deny"}, format="json"
    ).json()

    assert (created["expires_in"], created["on_expiry"]) == (600, "allow")
    assert (described["expires_in"], described["on_expiry"]) == (600, "allow")
    assert (denied["decision"], denied["expires_in"], denied["on_expiry"]) == ("deny", None, None)


def test_answers_are_what_their_components_document(admin: APIClient) -> None:
    created = admin.post(
        "/api/v1/permission-rules",
        {"tool": "refund", "decision": "ask", "expires_in": 600, "when": ABOVE_100},
        format="json",
    ).json()

    changed = admin.patch(
        f"/api/v1/permission-rules/{created['id']}", {"description": "x"}, format="json"
    ).json()

    assert_answers("PermissionRule", created)
    assert_answers("PaginatedPermissionRuleList", admin.get("/api/v1/permission-rules").json())
    assert isinstance(created["created_at"], int)
    assert abs(created["created_at"] - now_us()) < 60_000_000
    assert created["created_at"] <= created["updated_at"] < changed["updated_at"]
    assert changed["created_at"] == created["created_at"]


def test_the_list_pages_oldest_first(admin: APIClient) -> None:
    made = [
        admin.post(
            "/api/v1/permission-rules", {"tool": f"tool_{n}", "decision": "deny"}, format="json"
        ).json()["id"]
        for n in range(5)
    ]

    walked = pages(admin, "/api/v1/permission-rules?limit=2")
    back = admin.get(walked[-1]["previous"]).json()

    assert [[rule["id"] for rule in page["results"]] for page in walked] == [
        made[0:2], made[2:4], made[4:],
    ]  # fmt: skip
    assert [rule["id"] for rule in back["results"]] == made[2:4]
    assert admin.get("/api/v1/permission-rules?limit=0").json()["error"]["field"] == "limit"
    assert admin.get("/api/v1/permission-rules?cursor=x").json()["error"]["field"] == "cursor"
