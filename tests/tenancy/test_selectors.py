"""tenancy.selectors.membership_list (the console's tenant switcher)."""

from __future__ import annotations

import pytest

from tenancy.models import Role
from tenancy.selectors import membership_list
from tenancy.services import membership_set
from tests.factories import UserFactory, make_tenant

pytestmark = pytest.mark.django_db


def test_membership_list_holds_the_users_active_tenants_by_slug() -> None:
    user = UserFactory.create()
    for slug in ("zeta", "alpha", "gone"):
        membership_set(tenant=make_tenant(slug), user=user, role=Role.MEMBER)
    membership_set(tenant=make_tenant("not-mine"), user=UserFactory.create(), role=Role.ADMIN)
    gone = make_tenant("gone-too")
    membership_set(tenant=gone, user=user, role=Role.READ_ONLY)
    gone.is_active = False
    gone.save()

    assert [row.tenant.slug for row in membership_list(user=user)] == ["alpha", "gone", "zeta"]
