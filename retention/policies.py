"""Which retention applies to which tenant: its ``RetentionPolicy`` field when set, else the
operator's default (the ``RETENTION_*_DAYS`` settings, read when asked)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from django.conf import settings
from django.db.models import Q

from retention.models import POLICY_FIELDS, RetentionPolicy

DAY_US = 86_400 * 1_000_000


def default_days(field: str) -> int:
    """The operator's default for a policy field (0: keep forever)."""
    return int(getattr(settings, POLICY_FIELDS[field]))


def policy_days(policy: RetentionPolicy | None, field: str) -> int:
    """Days ``policy`` keeps ``field``'s history (0: forever); None or empty: the default."""
    value: int | None = None if policy is None else getattr(policy, field)
    return default_days(field) if value is None else value


@dataclass(frozen=True)
class Scope:
    """Tenants that keep one kind of history for the same ``days`` (never 0): ``tenants``
    those whose policy says so, plus, when ``rest``, every tenant whose policy leaves the
    field to the default (the default being ``days``)."""

    days: int
    tenants: tuple[uuid.UUID, ...]
    rest: bool
    overridden: tuple[uuid.UUID, ...]  # tenants whose policy sets the field (for ``rest``)

    def q(self, tenant_field: str = "tenant_id") -> Q:
        """The rows of these tenants."""
        chosen = Q(**{f"{tenant_field}__in": self.tenants})
        if not self.rest:
            return chosen
        return chosen | ~Q(**{f"{tenant_field}__in": self.overridden})

    def cutoff(self, now: int) -> int:
        """Rows older than this (µs) are past retention."""
        return now - self.days * DAY_US


def retention_scopes(field: str) -> list[Scope]:
    """The tenants grouped by how long they keep ``field``'s history; those keeping it
    forever are left out. One read of the policies."""
    policies = RetentionPolicy.objects.filter(**{f"{field}__isnull": False})
    set_by_policy: dict[uuid.UUID, int] = dict(
        policies.order_by("tenant_id").values_list("tenant_id", field)
    )
    default = default_days(field)
    by_days: dict[int, list[uuid.UUID]] = {}
    for tenant_id, days in set_by_policy.items():
        by_days.setdefault(days, []).append(tenant_id)
    overridden = tuple(set_by_policy)
    scopes = [
        Scope(days=days, tenants=tuple(tenants), rest=days == default, overridden=overridden)
        for days, tenants in sorted(by_days.items())
        if days > 0
    ]
    if default > 0 and default not in by_days:
        scopes.append(Scope(days=default, tenants=(), rest=True, overridden=overridden))
    return scopes
