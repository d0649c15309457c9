"""Reads for tenants, memberships and API keys."""

from __future__ import annotations

from typing import TYPE_CHECKING

from common.errors import AuthenticationFailed, NotFound
from common.tenant_wall import system_scope
from tenancy.models import Membership, Role, Tenant
from tenancy.principals import Principal

if TYPE_CHECKING:
    from django.contrib.auth.models import User


def tenant_get(*, slug: str) -> Tenant:
    try:
        return Tenant.objects.get(slug=slug)
    except Tenant.DoesNotExist as error:
        raise NotFound(f"no tenant with slug {slug!r}", field="tenant") from error


@system_scope("memberships")  # a user's memberships span tenants
def membership_list(*, user: User) -> list[Membership]:
    """``user``'s memberships in active tenants, by tenant slug (the console's tenant
    switcher)."""
    rows = Membership.objects.select_related("tenant").filter(user=user, tenant__is_active=True)
    return list(rows.order_by("tenant__slug"))


@system_scope("memberships")
def principal_for_user(*, user: User, tenant_slug: str | None) -> Principal:
    """The principal of a logged-in user, in the tenant named by ``tenant_slug``.

    Without a slug, a user with exactly one membership acts in that tenant.
    """
    memberships = Membership.objects.select_related("tenant").filter(
        user=user, tenant__is_active=True
    )
    if tenant_slug is not None:
        memberships = memberships.filter(tenant__slug=tenant_slug)
    found = list(memberships[:2])
    if not found:
        target = f"tenant {tenant_slug!r}" if tenant_slug else "any active tenant"
        raise AuthenticationFailed(f"user is not a member of {target}", code="no_membership")
    if len(found) > 1:
        raise AuthenticationFailed(
            "user belongs to several tenants; choose one with the X-Tenant header",
            code="tenant_required",
        )
    membership = found[0]
    return Principal(tenant=membership.tenant, role=Role(membership.role), user=user)
