from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING, ClassVar, Self, TypeVar
from zoneinfo import available_timezones

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models

from common.ids import new_id
from common.time import now

if TYPE_CHECKING:
    import datetime as dt


class Role(models.TextChoices):
    """What a caller may do inside its tenant; each role includes the ones below it."""

    ADMIN = "admin", "Admin"  # everything, including keys and members
    MEMBER = "member", "Member"  # read and write tenant data
    READ_ONLY = "read_only", "Read-only"  # read only

    @property
    def rank(self) -> int:
        return {Role.READ_ONLY: 0, Role.MEMBER: 1, Role.ADMIN: 2}[self]

    def allows(self, required: Role) -> bool:
        return self.rank >= required.rank


@cache
def _zone_names() -> frozenset[str]:
    return frozenset(available_timezones())


def time_zone_problem(name: str) -> str | None:
    """Why ``name`` is not a time zone a tenant may have (an IANA name that zoneinfo
    knows), or None."""
    if name in _zone_names():
        return None
    return f"{name!r} is not a time zone: use an IANA name such as UTC or Europe/Paris"


class Tenant(models.Model):
    """An isolated customer of the platform; owns every other row."""

    id = models.UUIDField(primary_key=True, default=new_id, editable=False)
    slug = models.SlugField(max_length=63, unique=True)
    name = models.CharField(max_length=200)
    is_active = models.BooleanField(default=True)
    # Whether models of this tenant may use the operator's platform credentials
    # (agents.credentials); None follows settings.PLATFORM_CREDENTIALS_GRANTED.
    platform_credentials = models.BooleanField(
        null=True,
        blank=True,
        default=None,
        verbose_name="platform credentials granted",
        help_text="May this tenant's models use the operator's provider keys? "
        "Unknown: the PLATFORM_CREDENTIALS_GRANTED setting decides.",
    )
    # Where the tenant's days and months begin (usage rollups, budget windows): an IANA name.
    time_zone = models.CharField(max_length=64, default="UTC")
    # The tenant's data key, wrapped by a master key (see common.crypto).
    data_key_wrapped = models.BinaryField(editable=False)
    created_at = models.DateTimeField(default=now, editable=False)

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.slug

    def clean(self) -> None:
        super().clean()
        problem = time_zone_problem(self.time_zone)
        if problem is not None:
            raise ValidationError({"time_zone": problem})


_M = TypeVar("_M", bound=models.Model)


class TenantQuerySet(models.QuerySet[_M]):
    def for_tenant(self, tenant: Tenant) -> Self:
        """The one door to tenant-owned rows: only ``tenant``'s."""
        return self.filter(tenant=tenant)


class TenantOwned(models.Model):
    """Base of every tenant-owned model: a ``tenant`` FK and the scoped manager."""

    tenant = models.ForeignKey(
        Tenant, on_delete=models.CASCADE, related_name="%(app_label)s_%(class)s_set"
    )

    objects: ClassVar[models.Manager[Self]] = TenantQuerySet.as_manager()

    class Meta:
        abstract = True


class TenantOwnedBulk(TenantOwned):
    """:class:`TenantOwned` for the rows runs write (threads, turns, messages, events, logs,
    ledger entries, audit entries): the same ``tenant`` relation, without a database
    constraint.

    The constraint's check locks the tenant's row (``FOR KEY SHARE``) at every insert, and
    at every update of a row the same transaction wrote before (PostgreSQL checks an
    unchanged key then too), so every write of every run of a tenant met on that one row:
    the hottest row of the database under load. What it guaranteed holds without it: the
    tenant wall's ``WITH CHECK`` pins ``tenant_id`` to the tenant the writer acts for, which
    exists (docs/tenant-wall.md). Deleting a tenant still deletes these rows: Django
    cascades it."""

    tenant = models.ForeignKey(
        Tenant,
        on_delete=models.CASCADE,
        related_name="%(app_label)s_%(class)s_set",
        db_constraint=False,
    )

    class Meta:
        abstract = True


class Membership(TenantOwned):
    """A human user's role in a tenant (for the admin, the console and session API calls)."""

    id = models.UUIDField(primary_key=True, default=new_id, editable=False)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.MEMBER)
    created_at = models.DateTimeField(default=now, editable=False)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "user"], name="membership_unique_user"),
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.tenant_id} as {self.role}"


class ApiKey(TenantOwned):
    """A machine credential. The secret is shown once; only its SHA-256 is stored.

    The full key reads ``sap_<prefix>_<secret>``; ``prefix`` is unique and finds the
    row, ``secret_hash`` proves the secret.
    """

    id = models.UUIDField(primary_key=True, default=new_id, editable=False)
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16, unique=True, editable=False)
    secret_hash = models.CharField(max_length=64, editable=False)
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.MEMBER)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=now, editable=False)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked = models.BooleanField(default=False)
    revoked_at = models.DateTimeField(null=True, blank=True, editable=False)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.name} (sap_{self.prefix}_…)"

    def is_expired(self, at: dt.datetime) -> bool:
        return self.expires_at is not None and self.expires_at <= at
