"""The admin's one door to tenant rows, and the pages for tenants, memberships and API keys.

Every admin of a tenant-owned model inherits :class:`TenantScopedAdmin`, which owns
``get_queryset()`` (subclasses may not override it; they implement ``scope_queryset``). A
superuser sees every tenant. A staff user who is not a superuser sees the rows of the active
tenants they are a member of, and nothing else: another tenant's row is "not found", its
foreign-key choices and list-filter choices are not offered. What they may do follows their
:class:`~tenancy.models.Role` in the row's tenant (``read_only`` views; ``member`` changes
tenant data; ``admin`` also manages API keys and memberships), not Django's model
permissions.

Times stored as microseconds since the epoch are shown as UTC datetimes, sortable, on every
list and detail page (``<field>_utc`` columns).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, TypeVar

from django import forms
from django.contrib import admin, messages
from django.db import models, transaction
from django.db.models import QuerySet
from django.http import HttpRequest

from common.audit import AuditAction, audit_record
from common.errors import ValidationFailed
from common.time import from_us
from tenancy import lockouts_admin  # noqa: F401 - registers the failed logins (superusers only)
from tenancy.auditing import user_actor
from tenancy.encryption import new_wrapped_data_key
from tenancy.models import ApiKey, Membership, Role, Tenant
from tenancy.services import api_key_create, api_key_issue, api_key_revoke

_M = TypeVar("_M", bound=models.Model)
_ROLES_ATTR = "_admin_tenant_roles"


def tenant_roles(request: HttpRequest) -> Mapping[uuid.UUID, Role]:
    """The requesting user's role in each active tenant they belong to (read once per
    request)."""
    cached: dict[uuid.UUID, Role] | None = getattr(request, _ROLES_ATTR, None)
    if cached is None:
        rows = Membership.objects.filter(user_id=request.user.pk or 0, tenant__is_active=True)
        cached = {
            tenant_id: Role(role) for tenant_id, role in rows.values_list("tenant_id", "role")
        }
        setattr(request, _ROLES_ATTR, cached)
    return cached


def role_allows(request: HttpRequest, required: Role, tenant_id: uuid.UUID | None) -> bool:
    """Whether the user may act with ``required`` in ``tenant_id`` (None: in some tenant).
    A superuser may do anything; a staff user as their membership's role allows."""
    user = request.user
    if not (user.is_active and user.is_staff):
        return False
    if user.is_superuser:
        return True
    roles = tenant_roles(request)
    if tenant_id is None:
        return any(role.allows(required) for role in roles.values())
    role = roles.get(tenant_id)
    return role is not None and role.allows(required)


def writable_tenant_ids(request: HttpRequest, required: Role) -> list[uuid.UUID]:
    return [tenant_id for tenant_id, role in tenant_roles(request).items() if role.allows(required)]


# Times ------------------------------------------------------------------------------------------


def format_us(micros: int | None) -> str | None:
    """Microseconds since the epoch as ``2026-01-31 12:00:00.123 UTC`` (None stays None, which
    the admin shows as its empty value)."""
    if micros is None:
        return None
    return from_us(micros).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"


def micros_fields(model: type[models.Model]) -> list[str]:
    """The model's times stored as microseconds (``BigIntegerField`` named ``*_at``)."""
    return [
        field.name
        for field in model._meta.concrete_fields
        if isinstance(field, models.BigIntegerField) and field.name.endswith("_at")
    ]


def _time_column(name: str) -> Callable[[Any], str | None]:
    def column(obj: Any) -> str | None:
        return format_us(getattr(obj, name))

    return admin.display(description=name.replace("_", " "), ordering=name)(column)


class MicrosTimes:
    """Shows each microsecond time as a ``<name>_utc`` column and read-only field, in place of
    the raw integer (on lists, detail pages and inlines)."""

    def install_times(self, model: type[models.Model]) -> None:
        self.time_fields = micros_fields(model)
        for name in self.time_fields:
            setattr(self, f"{name}_utc", _time_column(name))

    def time_name(self, name: Any) -> Any:
        return f"{name}_utc" if name in self.time_fields else name

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        fields = [self.time_name(name) for name in super().get_fields(request, obj)]  # type: ignore[misc]
        return list(dict.fromkeys(fields))

    def get_exclude(self, request: HttpRequest, obj: Any = None) -> Any:
        excluded = super().get_exclude(request, obj)  # type: ignore[misc]
        return [*(excluded or ()), *self.time_fields]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        fields = [self.time_name(name) for name in super().get_readonly_fields(request, obj)]  # type: ignore[misc]
        return [*fields, *(f"{n}_utc" for n in self.time_fields if f"{n}_utc" not in fields)]


# The one door -----------------------------------------------------------------------------------


class TenantScopedAdmin(MicrosTimes, admin.ModelAdmin[_M]):
    """Base of every admin of tenant-owned rows (see the module docstring).

    ``tenant_lookup`` is the row's path to its tenant (``"id"`` for tenants themselves);
    ``write_role`` the role adding, changing and deleting need; ``can_add``, ``can_change``
    and ``can_delete`` switch those off for everyone (rows written only through services).
    """

    tenant_lookup: ClassVar[str] = "tenant"
    write_role: ClassVar[Role] = Role.MEMBER
    can_add: ClassVar[bool] = True
    can_change: ClassVar[bool] = True
    can_delete: ClassVar[bool] = True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "get_queryset" in cls.__dict__:
            raise TypeError(
                f"{cls.__name__} overrides get_queryset(); implement scope_queryset() instead, "
                "so tenant scoping cannot be bypassed"
            )

    def __init__(self, model: type[_M], admin_site: admin.AdminSite) -> None:
        super().__init__(model, admin_site)
        self.install_times(self.model)

    def get_queryset(self, request: HttpRequest) -> QuerySet[_M]:
        rows = self.scope_queryset(request, super().get_queryset(request))
        if request.user.is_superuser:
            return rows
        return rows.filter(**{f"{self.tenant_lookup}__in": list(tenant_roles(request))})

    def scope_queryset(self, request: HttpRequest, queryset: QuerySet[_M]) -> QuerySet[_M]:
        """Narrow or annotate the rows (tenant scoping is applied after, always)."""
        return queryset

    def row_tenant_id(self, obj: Any) -> uuid.UUID:
        found: uuid.UUID = (
            obj.pk if self.tenant_lookup == "id" else getattr(obj, f"{self.tenant_lookup}_id")
        )
        return found

    def _allows(self, request: HttpRequest, required: Role, obj: Any) -> bool:
        return role_allows(request, required, None if obj is None else self.row_tenant_id(obj))

    def has_module_permission(self, request: HttpRequest) -> bool:
        return role_allows(request, Role.READ_ONLY, None)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self._allows(request, Role.READ_ONLY, obj)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return self.can_add and self._allows(request, self.write_role, None)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self.can_change and self._allows(request, self.write_role, obj)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self.can_delete and self._allows(request, self.write_role, obj)

    def get_list_display(self, request: HttpRequest) -> Any:
        return [self.time_name(name) for name in super().get_list_display(request)]

    def get_list_filter(self, request: HttpRequest) -> Any:
        filters = super().get_list_filter(request)
        if request.user.is_superuser:
            return filters
        # The plain related filter lists every tenant; this one only those of visible rows.
        return [
            (name, admin.RelatedOnlyFieldListFilter) if name == "tenant" else name
            for name in filters
        ]

    def formfield_for_foreignkey(
        self, db_field: models.ForeignKey[Any, Any], request: HttpRequest, **kwargs: Any
    ) -> forms.ModelChoiceField[Any] | None:
        if not request.user.is_superuser:
            kwargs["queryset"] = scoped_choices(db_field, request, self.write_role)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)


def is_operator(request: HttpRequest) -> bool:
    """The request is an active superuser's in the admin: the platform's operator."""
    user = request.user
    return bool(user.is_active and user.is_staff and user.is_superuser)


class OperatorWritesAdmin(TenantScopedAdmin[_M]):
    """Rows the operator sets for a tenant (quotas, retention): only superusers add, change
    or delete them; a tenant's staff see their own tenant's."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return is_operator(request)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return is_operator(request)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return is_operator(request)


def scoped_choices(
    db_field: models.ForeignKey[Any, Any], request: HttpRequest, required: Role
) -> QuerySet[Any]:
    """The rows a staff user may pick for ``db_field``: tenants (and tenant-owned rows) where
    they hold ``required``; other models unrestricted."""
    related: type[models.Model] = db_field.related_model  # type: ignore[assignment]
    rows = related._default_manager.all()
    tenants = writable_tenant_ids(request, required)
    if related is Tenant:
        return rows.filter(id__in=tenants)
    if any(field.name == "tenant" for field in related._meta.concrete_fields):
        return rows.filter(tenant_id__in=tenants)
    return rows


class TenantScopedInline(MicrosTimes, admin.TabularInline[_M, Any]):
    """An inline on a scoped admin's page: the parent row is already scoped, so its rows are
    the parent tenant's; permissions follow the user's role in that tenant."""

    extra = 0
    write_role: ClassVar[Role] = Role.MEMBER
    read_only: ClassVar[bool] = False

    def __init__(self, parent_model: type[models.Model], admin_site: admin.AdminSite) -> None:
        super().__init__(parent_model, admin_site)
        self.install_times(self.model)

    @staticmethod
    def _tenant_id(obj: Any) -> uuid.UUID | None:
        if obj is None:
            return None
        found: uuid.UUID = obj.pk if isinstance(obj, Tenant) else obj.tenant_id
        return found

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return role_allows(request, Role.READ_ONLY, self._tenant_id(obj))

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return not self.read_only and role_allows(request, self.write_role, self._tenant_id(obj))

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return not self.read_only and role_allows(request, self.write_role, self._tenant_id(obj))

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return not self.read_only and role_allows(request, self.write_role, self._tenant_id(obj))

    def formfield_for_foreignkey(
        self, db_field: models.ForeignKey[Any, Any], request: HttpRequest, **kwargs: Any
    ) -> forms.ModelChoiceField[Any] | None:
        if not request.user.is_superuser:
            kwargs["queryset"] = scoped_choices(db_field, request, self.write_role)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)


# Tenancy's own pages ----------------------------------------------------------------------------


class MembershipInline(TenantScopedInline[Membership]):
    """Editable with the tenant (by superusers); tenant admins manage members on the
    membership pages, since their tenant's page is read-only to them."""

    model = Membership
    write_role = Role.ADMIN
    autocomplete_fields = ["user"]

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.is_superuser

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.is_superuser

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.is_superuser


@admin.register(Tenant)
class TenantAdmin(TenantScopedAdmin[Tenant]):
    """Tenants are made, changed and deactivated by superusers (not deleted); tenant staff
    see their own, read-only."""

    tenant_lookup = "id"
    list_display = ["slug", "name", "is_active", "platform_credentials", "time_zone",
                    "created_at"]  # fmt: skip
    search_fields = ["slug", "name"]
    readonly_fields = ["id", "created_at"]
    fields = ["id", "slug", "name", "is_active", "platform_credentials", "time_zone",
              "created_at"]  # fmt: skip
    inlines = [MembershipInline]

    def formfield_for_dbfield(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        field = super().formfield_for_dbfield(db_field, request, **kwargs)
        if db_field.name == "time_zone" and isinstance(field, forms.CharField):
            field.required, field.empty_value = False, "UTC"  # Tenant.clean checks a name
            field.help_text = (
                "Where the tenant's days and months begin (usage by day, budget windows): an "
                "IANA name such as UTC, Europe/Paris or America/New_York; empty: UTC."
            )
        return field

    def has_add_permission(self, request: HttpRequest) -> bool:
        return request.user.is_superuser

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.is_superuser

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # A cascade would leave the tenant's stored files behind: deactivate it instead.
        return False

    def save_model(self, request: HttpRequest, obj: Tenant, form: Any, change: bool) -> None:
        if not change:
            obj.data_key_wrapped = new_wrapped_data_key(obj.id)
        super().save_model(request, obj, form, change)


@admin.register(Membership)
class MembershipAdmin(TenantScopedAdmin[Membership]):
    write_role = Role.ADMIN
    list_display = ["user", "tenant", "role", "created_at"]
    list_filter = ["role", "tenant"]
    search_fields = ["user__username", "tenant__slug"]
    autocomplete_fields = ["user"]
    fields = ["tenant", "user", "role"]

    def get_readonly_fields(self, request: HttpRequest, obj: Membership | None = None) -> Any:
        return ["tenant", "user"] if obj is not None else []

    def save_model(self, request: HttpRequest, obj: Membership, form: Any, change: bool) -> None:
        super().save_model(request, obj, form, change)
        action = AuditAction.MEMBERSHIP_CHANGED if change else AuditAction.MEMBERSHIP_CREATED
        _membership_audit(request, obj, action)

    def delete_model(self, request: HttpRequest, obj: Membership) -> None:
        _membership_audit(request, obj, AuditAction.MEMBERSHIP_DELETED)
        super().delete_model(request, obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Membership]) -> None:
        for membership in queryset.select_related("tenant", "user"):
            _membership_audit(request, membership, AuditAction.MEMBERSHIP_DELETED)
        super().delete_queryset(request, queryset)


def _membership_audit(request: HttpRequest, membership: Membership, action: AuditAction) -> None:
    """A membership change made in the admin (inside the admin's transaction)."""
    details = {"user": membership.user.get_username(), "role": membership.role}
    audit_record(
        tenant=membership.tenant, actor=user_actor(request.user), action=action,  # type: ignore[arg-type]
        target_type="membership", target_id=membership.pk, details=details,
    )  # fmt: skip


class ApiKeyForm(forms.ModelForm[ApiKey]):
    """Checks a new key as the service does (``api_key_issue``), so a blank name or a past
    expiry is shown at its field."""

    class Meta:
        model = ApiKey
        fields = ["tenant", "name", "role", "expires_at"]

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        if self.instance._state.adding and not self.errors:
            trial = ApiKey(name=cleaned.get("name", ""), expires_at=cleaned.get("expires_at"))
            try:
                api_key_issue(api_key=trial)
            except ValidationFailed as error:
                self.add_error(error.field if error.field in self.fields else None, error.message)
        return cleaned


@admin.register(ApiKey)
class ApiKeyAdmin(TenantScopedAdmin[ApiKey]):
    """Keys are made by ``api_key_create``: the secret is shown once, as a message, and only
    its hash is stored (never shown). Revoking goes through ``api_key_revoke``."""

    form = ApiKeyForm
    write_role = Role.ADMIN
    list_display = ["name", "tenant", "role", "key_prefix", "revoked", "expires_at", "last_used_at"]
    list_filter = ["role", "revoked", "tenant"]
    search_fields = ["name", "prefix", "tenant__slug"]
    actions = ["revoke_selected"]
    _detail_fields = [
        "key_prefix",
        "revoked",
        "revoked_at",
        "created_by",
        "created_at",
        "last_used_at",
    ]

    @admin.display(description="prefix")
    def key_prefix(self, api_key: ApiKey) -> str:
        return f"sap_{api_key.prefix}_…"

    def get_fields(self, request: HttpRequest, obj: ApiKey | None = None) -> Any:
        base = ["tenant", "name", "role", "expires_at"]
        return base if obj is None else [*base, *self._detail_fields]

    def get_readonly_fields(self, request: HttpRequest, obj: ApiKey | None = None) -> Any:
        return [] if obj is None else ["tenant", *self._detail_fields]

    def save_model(self, request: HttpRequest, obj: ApiKey, form: Any, change: bool) -> None:
        if change:
            super().save_model(request, obj, form, change)
            return
        issued = api_key_create(
            tenant=obj.tenant, name=obj.name, role=Role(obj.role), expires_at=obj.expires_at,
            created_by=request.user if request.user.is_authenticated else None,
        )  # fmt: skip
        audit_record(
            tenant=obj.tenant, actor=user_actor(request.user),  # type: ignore[arg-type]
            action=AuditAction.API_KEY_CREATED, target_type="api_key",
            target_id=issued.api_key.id, details={"name": obj.name, "role": obj.role},
        )  # fmt: skip
        for field in ApiKey._meta.concrete_fields:
            setattr(obj, field.attname, getattr(issued.api_key, field.attname))
        obj._state.adding = False
        self.message_user(
            request,
            f"API key created. Copy it now, it is not shown again: {issued.secret}",
            level=messages.WARNING,
        )

    @admin.action(description="Revoke selected API keys", permissions=["change"])
    def revoke_selected(self, request: HttpRequest, queryset: QuerySet[ApiKey]) -> None:
        revoked = 0
        for api_key in queryset.select_related("tenant"):
            if self.has_change_permission(request, api_key):
                with transaction.atomic():
                    api_key_revoke(tenant=api_key.tenant, api_key_id=api_key.id)
                    audit_record(
                        tenant=api_key.tenant, actor=user_actor(request.user),  # type: ignore[arg-type]
                        action=AuditAction.API_KEY_REVOKED, target_type="api_key",
                        target_id=api_key.id, details={"name": api_key.name},
                    )  # fmt: skip
                revoked += 1
        self.message_user(request, f"Revoked {revoked} key(s).")
