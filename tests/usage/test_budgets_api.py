"""Budgets over REST: admins write them, every role reads them, every rule is a 400 naming its
field, operator budgets are shown but never changed (403) and cap the tenant's own, each
change sends usage.signals.budget_changed, and each budget shows its current standing."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from rest_framework.test import APIClient

from common.time import now_us
from tenancy.models import Role, Tenant
from tests.answers import documented
from usage.budget_settings import STANDING_CAP, current_window_start
from usage.models import Budget, BudgetCounter
from usage.signals import budget_changed

pytestmark = pytest.mark.django_db

DAILY = {"name": "daily", "scope": "tenant", "window": "day", "limit_cost": "25.50"}


@pytest.fixture
def admin(tenant: Tenant, client_for: Callable[..., APIClient]) -> APIClient:
    return client_for(tenant, Role.ADMIN)


@pytest.fixture
def sent() -> Iterator[list[dict[str, Any]]]:
    """What budget_changed was sent with."""
    received: list[dict[str, Any]] = []

    def receiver(sender: Any, **kwargs: Any) -> None:
        received.append({key: kwargs[key] for key in ("tenant_id", "budget_id")})

    budget_changed.connect(receiver, weak=False)
    yield received
    budget_changed.disconnect(receiver)


def test_an_admin_creates_reads_changes_and_deletes_a_budget(
    tenant: Tenant, admin: APIClient, member: APIClient, sent: list[dict[str, Any]]
) -> None:
    created = admin.post("/api/v1/budgets", {**DAILY, "thresholds": [80, 50]}, format="json")
    budget_id = created.json()["id"]
    read = member.get(f"/api/v1/budgets/{budget_id}")
    patched = admin.patch(
        f"/api/v1/budgets/{budget_id}", {"limit_tokens": 1_000_000, "policy": "reject"},
        format="json",
    )  # fmt: skip
    listed = member.get("/api/v1/budgets")
    deleted = admin.delete(f"/api/v1/budgets/{budget_id}")

    body = documented("post", "/api/v1/budgets/", created)
    assert created.status_code == 201
    assert {k: body[k] for k in ("name", "scope", "subject", "window", "policy")} == {
        "name": "daily", "scope": "tenant", "subject": "", "window": "day", "policy": "pause",
    }  # fmt: skip
    assert (body["limit_cost"], body["limit_micros"], body["limit_tokens"]) == (
        "25.500000", 25_500_000, None,
    )  # fmt: skip
    assert (body["thresholds"], body["operator"], body["currency"]) == ([50, 80], False, "USD")
    assert read.json() == body
    documented("patch", "/api/v1/budgets/{id}/", patched)
    assert (patched.json()["limit_tokens"], patched.json()["policy"]) == (1_000_000, "reject")
    assert patched.json()["limit_cost"] == "25.500000"  # kept
    assert patched.json()["updated_at"] >= body["updated_at"]
    assert [item["id"] for item in listed.json()["results"]] == [budget_id]
    assert deleted.status_code == 204
    assert not Budget.objects.filter(pk=budget_id).exists()
    assert sent == [{"tenant_id": tenant.pk, "budget_id": Budget._meta.pk.to_python(budget_id)}] * 3


@pytest.mark.parametrize("role", [Role.MEMBER, Role.READ_ONLY])
def test_members_and_readers_read_but_do_not_write(
    tenant: Tenant, role: Role, client_for: Callable[..., APIClient],
    sent: list[dict[str, Any]],
) -> None:  # fmt: skip
    budget = Budget.objects.create(tenant=tenant, name="cap", scope="tenant", window="month",
                                   limit_tokens=10)  # fmt: skip
    client = client_for(tenant, role)

    read = client.get(f"/api/v1/budgets/{budget.pk}")
    created = client.post("/api/v1/budgets", DAILY, format="json")
    patched = client.patch(f"/api/v1/budgets/{budget.pk}", {"limit_tokens": 99}, format="json")
    deleted = client.delete(f"/api/v1/budgets/{budget.pk}")

    assert read.status_code == 200
    assert [created.status_code, patched.status_code, deleted.status_code] == [403] * 3
    assert created.json()["error"]["code"] == "forbidden"
    assert list(Budget.objects.for_tenant(tenant).values_list("name", "limit_tokens")) == [
        ("cap", 10)
    ]
    assert sent == []


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"scope": "planet"}, "scope"),
        ({"subject": "helper"}, "subject"),  # a tenant budget has no subject
        ({"scope": "turn", "window": "turn", "subject": "x"}, "subject"),
        ({"scope": "turn", "window": "day"}, "window"),
        ({"scope": "agent", "window": "turn"}, "window"),
        ({"scope": "thread", "subject": "not-a-thread-id"}, "subject"),
        ({"scope": "agent", "subject": "a" * 65}, "subject"),
        ({"window": "week"}, "window"),
        ({"limit_cost": None}, "limit_cost"),  # neither limit
        ({"limit_cost": "-1"}, "limit_cost"),
        ({"limit_cost": "1.0000001"}, "limit_cost"),
        ({"limit_cost": "1e3"}, "limit_cost"),
        ({"limit_cost": True}, "limit_cost"),
        ({"limit_cost": "9" * 13}, "limit_cost"),
        ({"limit_tokens": -5}, "limit_tokens"),
        ({"limit_tokens": "100"}, "limit_tokens"),
        ({"policy": "shout"}, "policy"),
        ({"thresholds": [50, 50]}, "thresholds"),
        ({"thresholds": [0]}, "thresholds"),
        ({"thresholds": [100]}, "thresholds"),
        ({"thresholds": [10, 20, 30, 40, 50, 60]}, "thresholds"),
        ({"thresholds": "50"}, "thresholds"),
        ({"name": ""}, "name"),
        ({"name": "n" * 101}, "name"),
        ({"limt_cost": "1"}, "limt_cost"),
        ({"id": "00000000-0000-4000-8000-000000000000"}, "id"),
        ({"operator": "yes"}, "operator"),
    ],
)
def test_every_rule_is_a_400_naming_its_field(
    admin: APIClient, tenant: Tenant, changes: dict[str, Any], field: str
) -> None:
    response = admin.post("/api/v1/budgets", {**DAILY, **changes}, format="json")

    assert response.status_code == 400, response.json()
    assert response.json()["error"]["field"] == field
    assert not Budget.objects.for_tenant(tenant).exists()


@pytest.mark.parametrize(
    ("changes", "stored"),
    [
        ({"limit_cost": 12.5}, (12_500_000, None)),
        ({"limit_cost": 3}, (3_000_000, None)),
        ({"limit_cost": "0.000001"}, (1, None)),
        ({"limit_cost": None, "limit_tokens": 0}, (None, 0)),
        ({"scope": "thread", "subject": "11111111-1111-4111-8111-111111111111",
          "window": "lifetime"}, (25_500_000, None)),
        ({"scope": "turn", "window": "turn"}, (25_500_000, None)),
        ({"scope": "user", "subject": "ann", "window": "month"}, (25_500_000, None)),
    ],
)  # fmt: skip
def test_limits_are_amounts_or_numbers_and_scopes_take_their_windows(
    admin: APIClient, tenant: Tenant, changes: dict[str, Any], stored: tuple[Any, Any]
) -> None:
    response = admin.post("/api/v1/budgets", {**DAILY, **changes}, format="json")

    assert response.status_code == 201, response.json()
    row = Budget.objects.for_tenant(tenant).get()
    assert (row.limit_micros, row.limit_tokens) == stored


def test_a_name_is_unique_in_a_tenant(
    admin: APIClient, other_tenant: Tenant, client_for: Callable[..., APIClient]
) -> None:
    first = admin.post("/api/v1/budgets", DAILY, format="json")
    again = admin.post("/api/v1/budgets", DAILY, format="json")
    other = admin.post("/api/v1/budgets", {**DAILY, "name": "other"}, format="json")
    renamed = admin.patch(f"/api/v1/budgets/{other.json()['id']}", {"name": "daily"},
                          format="json")  # fmt: skip
    elsewhere = client_for(other_tenant).post("/api/v1/budgets", DAILY, format="json")

    assert first.status_code == 201
    assert (again.status_code, again.json()["error"]["field"]) == (400, "name")
    assert (renamed.status_code, renamed.json()["error"]["field"]) == (400, "name")
    assert elsewhere.status_code == 201


def _operator_cap(tenant: Tenant, **fields: Any) -> Budget:
    values = {
        "name": "platform cap",
        "scope": "agent",
        "window": "day",
        "limit_micros": 10_000_000,
        "limit_tokens": 50_000,
        "operator": True,
        **fields,
    }
    return Budget.objects.create(tenant=tenant, **values)  # fmt: skip


def test_operator_budgets_are_shown_but_not_created_changed_or_deleted(
    admin: APIClient, tenant: Tenant, sent: list[dict[str, Any]]
) -> None:
    cap = _operator_cap(tenant)

    listed = admin.get("/api/v1/budgets").json()["results"]
    created = admin.post("/api/v1/budgets", {**DAILY, "operator": True}, format="json")
    patched = admin.patch(f"/api/v1/budgets/{cap.pk}", {"limit_micros": 1}, format="json")
    limited = admin.patch(f"/api/v1/budgets/{cap.pk}", {"limit_cost": "99"}, format="json")
    deleted = admin.delete(f"/api/v1/budgets/{cap.pk}")

    assert [(item["name"], item["operator"]) for item in listed] == [("platform cap", True)]
    assert created.status_code == 403
    assert "operator budgets" in created.json()["error"]["message"]
    assert patched.status_code == 400  # limit_micros is not a setting: an unknown key first
    assert limited.status_code == 403
    assert "operator" in limited.json()["error"]["message"]
    assert deleted.status_code == 403
    cap.refresh_from_db()
    assert cap.limit_micros == 10_000_000
    assert Budget.objects.for_tenant(tenant).count() == 1
    assert sent == []


@pytest.mark.parametrize(
    ("mine", "field", "cap"),
    [
        ({"limit_cost": "10.01"}, "limit_cost", "10.000000 USD"),
        ({"limit_cost": None, "limit_tokens": 50_001}, "limit_tokens", "50000 tokens"),
    ],
)
def test_a_tenant_budget_may_not_exceed_the_operators_cap(
    admin: APIClient, tenant: Tenant, mine: dict[str, Any], field: str, cap: str
) -> None:
    _operator_cap(tenant)
    body = {"name": "mine", "scope": "agent", "subject": "helper", "window": "day", **mine}

    response = admin.post("/api/v1/budgets", body, format="json")
    within = admin.post("/api/v1/budgets", {**body, "limit_cost": "10", "limit_tokens": None},
                        format="json")  # fmt: skip
    other_window = admin.post(
        "/api/v1/budgets", {**body, "name": "monthly", "window": "month"}, format="json"
    )

    assert response.status_code == 400
    error = response.json()["error"]
    assert error["field"] == field
    assert cap in error["message"]
    assert "platform cap" in error["message"]
    assert within.status_code == 201
    assert other_window.status_code == 201


def test_raising_a_limit_above_the_operators_cap_is_refused(
    admin: APIClient, tenant: Tenant
) -> None:
    _operator_cap(tenant, scope="tenant", window="month")
    mine = admin.post("/api/v1/budgets", {**DAILY, "window": "month", "limit_cost": "5"},
                      format="json").json()  # fmt: skip

    raised = admin.patch(f"/api/v1/budgets/{mine['id']}", {"limit_cost": "11"}, format="json")

    assert (raised.status_code, raised.json()["error"]["field"]) == (400, "limit_cost")
    assert Budget.objects.get(pk=mine["id"]).limit_micros == 5_000_000


# Standing -------------------------------------------------------------------------------------


def _counter(budget: Budget, subject: str, window_start: int, **figures: int) -> BudgetCounter:
    return BudgetCounter.objects.create(
        tenant=budget.tenant, budget=budget, subject=subject, window_start=window_start,
        **figures,
    )  # fmt: skip


def test_a_budget_shows_its_current_windows_standing(admin: APIClient, tenant: Tenant) -> None:
    budget = Budget.objects.create(
        tenant=tenant, name="per agent", scope="agent", window="day", limit_micros=2_000_000,
        limit_tokens=1_000,
    )  # fmt: skip
    today = current_window_start("day", tenant.time_zone, now_us())
    _counter(budget, "helper", today, spent_micros=500_000, spent_tokens=300,
             reserved_micros=250_000, reserved_tokens=100)  # fmt: skip
    _counter(budget, "careful", today, spent_micros=1_900_000, reserved_micros=400_000)
    _counter(budget, "helper", today - 86_400_000_000, spent_micros=9_000_000)  # yesterday

    response = admin.get(f"/api/v1/budgets/{budget.pk}")

    standing = documented("get", "/api/v1/budgets/{id}/", response)["standing"]
    assert standing == [
        {"subject": "careful", "window_start": today, "spent_cost": "1.900000",
         "spent_tokens": 0, "reserved_cost": "0.400000", "reserved_tokens": 0,
         "remaining_cost": "0.000000", "remaining_tokens": 1_000},
        {"subject": "helper", "window_start": today, "spent_cost": "0.500000",
         "spent_tokens": 300, "reserved_cost": "0.250000", "reserved_tokens": 100,
         "remaining_cost": "1.250000", "remaining_tokens": 600},
    ]  # fmt: skip


def test_a_budget_of_each_thread_shows_at_most_its_cap_of_counters(
    admin: APIClient, tenant: Tenant
) -> None:
    budget = Budget.objects.create(tenant=tenant, name="threads", scope="thread",
                                   window="lifetime", limit_tokens=100)  # fmt: skip
    for n in range(STANDING_CAP + 5):
        _counter(budget, f"thread-{n:02}", 0, spent_tokens=n)
    lone = Budget.objects.create(tenant=tenant, name="tokens", scope="tenant",
                                 window="month", limit_tokens=5)  # fmt: skip

    listed = {item["name"]: item for item in admin.get("/api/v1/budgets").json()["results"]}

    standing = listed["threads"]["standing"]
    assert len(standing) == STANDING_CAP
    assert standing[0]["subject"] == f"thread-{STANDING_CAP + 4:02}"  # the most spent first
    assert standing[0]["remaining_cost"] is None  # no cost limit
    assert listed[lone.name]["standing"] == []


def test_another_tenants_budget_is_404(
    tenant: Tenant, other_tenant: Tenant, client_for: Callable[..., APIClient]
) -> None:
    theirs = Budget.objects.create(tenant=other_tenant, name="x", scope="tenant", window="day",
                                   limit_tokens=1)  # fmt: skip

    response = client_for(tenant).get(f"/api/v1/budgets/{theirs.pk}")
    listed = client_for(tenant).get("/api/v1/budgets").json()

    assert response.status_code == 404
    assert listed["results"] == []
