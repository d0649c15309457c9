"""The retention policy admin: a superuser sets any tenant's policy; a tenant's staff see
their own tenant's and cannot change it; another tenant's is not theirs to see."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from retention.models import RetentionPolicy
from tenancy.models import Role, Tenant
from tests.factories import make_member

pytestmark = pytest.mark.django_db

FORM = {"events_days": "7", "logs_days": "", "webhook_deliveries_days": "0",
        "finished_turns_days": "", "terminated_threads_days": "30"}  # fmt: skip


def test_a_superuser_sets_a_tenants_policy_with_the_defaults_named(
    tenant: Tenant, client: Client
) -> None:
    client.force_login(User.objects.create_superuser("root", password="pw-for-tests"))

    form = client.get("/admin/retention/retentionpolicy/add/").content.decode()
    added = client.post("/admin/retention/retentionpolicy/add/",
                        {**FORM, "tenant": str(tenant.pk)})  # fmt: skip

    assert "Empty: the setting RETENTION_EVENTS_DAYS (now 90); 0: forever." in form
    assert added.status_code == 302, added.content[:2000]
    policy = RetentionPolicy.objects.get(tenant=tenant)
    fields = ("events_days", "logs_days", "webhook_deliveries_days", "finished_turns_days",
              "terminated_threads_days")  # fmt: skip
    assert [getattr(policy, name) for name in fields] == [7, None, 0, None, 30]


def test_tenant_staff_see_their_own_policy_and_cannot_change_it(
    tenant: Tenant, other_tenant: Tenant, client: Client
) -> None:
    mine = RetentionPolicy.objects.create(tenant=tenant, events_days=7)
    theirs = RetentionPolicy.objects.create(tenant=other_tenant, events_days=3)
    client.force_login(make_member(tenant, role=Role.ADMIN, is_staff=True))

    listed = client.get("/admin/retention/retentionpolicy/")
    viewed = client.get(f"/admin/retention/retentionpolicy/{mine.pk}/change/")
    changed = client.post(f"/admin/retention/retentionpolicy/{mine.pk}/change/",
                          {**FORM, "events_days": "1"})  # fmt: skip
    added = client.get("/admin/retention/retentionpolicy/add/")
    other = client.get(f"/admin/retention/retentionpolicy/{theirs.pk}/change/")

    assert listed.status_code == 200
    assert f"/admin/retention/retentionpolicy/{mine.pk}/change/" in listed.content.decode()
    assert f"/admin/retention/retentionpolicy/{theirs.pk}/change/" not in listed.content.decode()
    assert viewed.status_code == 200
    assert changed.status_code == 403
    assert added.status_code == 403
    assert other.status_code in (302, 404)
    mine.refresh_from_db()
    assert mine.events_days == 7
