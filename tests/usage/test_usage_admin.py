"""The usage app's admin pages for budgets, the ledger and its rollups, and a tenant's time
zone: superusers set operator budgets (checked by default) under the API's rules, a tenant's
admins keep its own and cannot touch the operator's, the ledger and rollups are read-only,
and a time zone must be one zoneinfo knows."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.test import Client

from tenancy.models import Role, Tenant
from tests.factories import make_member
from usage.ledger import Entry, record
from usage.models import Budget, LedgerEntry, Rollup
from usage.signals import budget_changed

pytestmark = pytest.mark.django_db

FORM = {"name": "platform cap", "scope": "agent", "subject": "", "window": "day",
        "limit_cost": "10.5", "limit_tokens": "", "policy": "pause",
        "thresholds_text": "80, 50"}  # fmt: skip


@pytest.fixture
def root(client: Client) -> Client:
    client.force_login(User.objects.create_superuser("root", password="pw-for-tests"))
    return client


def test_a_superuser_adds_an_operator_budget_checked_by_default(
    tenant: Tenant, root: Client
) -> None:
    sent: list[dict[str, Any]] = []

    def receiver(sender: Any, **kwargs: Any) -> None:
        sent.append(kwargs)

    budget_changed.connect(receiver, weak=False)
    try:
        form = root.get("/admin/usage/budget/add/").content.decode()
        added = root.post("/admin/usage/budget/add/",
                          {**FORM, "tenant": str(tenant.pk), "operator": "on"})  # fmt: skip
    finally:
        budget_changed.disconnect(receiver)

    assert re.search(r'<input type="checkbox" name="operator"[^>]* checked>', form)
    assert added.status_code == 302, added.content[:2000]
    budget = Budget.objects.get(tenant=tenant)
    assert (budget.operator, budget.limit_micros, budget.thresholds) == (True, 10_500_000, [50, 80])
    assert [(s["tenant_id"], s["budget_id"]) for s in sent] == [(tenant.pk, budget.pk)]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"scope": "turn", "window": "day"}, "window must be turn for a turn budget"),
        ({"limit_cost": ""}, "set limit_cost, limit_tokens or both"),
        ({"thresholds_text": "50, 50"}, "thresholds must be a list"),
        ({"thresholds_text": "half"}, "thresholds must be a list"),
        ({"scope": "tenant", "subject": "helper"}, "subject must be"),
    ],
)
def test_the_admin_keeps_the_apis_rules(
    tenant: Tenant, root: Client, changes: dict[str, str], message: str
) -> None:
    answer = root.post("/admin/usage/budget/add/",
                       {**FORM, **changes, "tenant": str(tenant.pk)})  # fmt: skip

    assert answer.status_code == 200
    assert message in answer.content.decode()
    assert not Budget.objects.exists()


def test_tenant_admins_keep_their_budgets_but_not_the_operators(
    tenant: Tenant, client: Client
) -> None:
    cap = Budget.objects.create(tenant=tenant, name="platform cap", scope="agent", window="day",
                                limit_micros=10_000_000, operator=True)  # fmt: skip
    client.force_login(make_member(tenant, role=Role.ADMIN, is_staff=True))

    over = client.post("/admin/usage/budget/add/", {**FORM, "name": "mine", "limit_cost": "11",
                                                    "tenant": str(tenant.pk)})  # fmt: skip
    within = client.post("/admin/usage/budget/add/", {**FORM, "name": "mine", "limit_cost": "9",
                                                      "tenant": str(tenant.pk)})  # fmt: skip
    changed = client.post(f"/admin/usage/budget/{cap.pk}/change/", {**FORM, "limit_cost": "99"})
    deleted = client.post(f"/admin/usage/budget/{cap.pk}/delete/", {"post": "yes"})

    assert over.status_code == 200
    assert "limit_cost may not exceed 10.000000 USD" in over.content.decode()
    assert within.status_code == 302
    mine = Budget.objects.get(name="mine")
    assert (mine.operator, mine.limit_micros) == (False, 9_000_000)  # never the operator's
    assert changed.status_code == 403
    assert deleted.status_code == 403
    cap.refresh_from_db()
    assert cap.limit_micros == 10_000_000


def test_the_ledger_and_rollups_are_listed_read_only(tenant: Tenant, root: Client) -> None:
    record(Entry(tenant_id=tenant.pk, key="call", kind="model", agent="helper", model="fast",
                 input_tokens=10, cost_micros=None))  # fmt: skip
    entry = LedgerEntry.objects.get()
    rollup = Rollup.objects.filter(period="hour").get()

    ledger = root.get("/admin/usage/ledgerentry/?kind__exact=model")
    rollups = root.get("/admin/usage/rollup/?period__exact=hour")
    add = root.get("/admin/usage/ledgerentry/add/")
    change = root.post(f"/admin/usage/rollup/{rollup.pk}/change/", {"calls": "99"})

    assert ledger.status_code == 200
    assert "unknown" in ledger.content.decode()  # its cost, never 0
    assert rollups.status_code == 200
    assert "≥ 0.000000" in rollups.content.decode()
    assert add.status_code == 403
    assert change.status_code == 403
    rollup.refresh_from_db()
    assert rollup.calls == 1
    assert root.get(f"/admin/usage/ledgerentry/{entry.pk}/change/").status_code == 200


def test_a_tenants_time_zone_must_be_one_zoneinfo_knows(tenant: Tenant, root: Client) -> None:
    page = f"/admin/tenancy/tenant/{tenant.pk}/change/"
    form = {"slug": tenant.slug, "name": tenant.name, "is_active": "on",
            "platform_credentials": "unknown", "tenancy_membership_set-TOTAL_FORMS": "0",
            "tenancy_membership_set-INITIAL_FORMS": "0"}  # fmt: skip

    refused = root.post(page, {**form, "time_zone": "Mars/Olympus_Mons"})
    accepted = root.post(page, {**form, "time_zone": "Europe/Paris"})

    assert refused.status_code == 200
    assert "is not a time zone" in refused.content.decode()
    assert accepted.status_code == 302, accepted.content[:3000]
    tenant.refresh_from_db()
    assert tenant.time_zone == "Europe/Paris"
    tenant.time_zone = "Nowhere/At_All"
    with pytest.raises(ValidationError) as error:
        tenant.full_clean()
    assert "time_zone" in error.value.message_dict
