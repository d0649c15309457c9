"""The base of every tenant-scoped API view.

:class:`TenantScopedViewSet` owns ``get_queryset()``: it always starts from
``Model.objects.for_tenant(<caller's tenant>)``, so another tenant's object is a
404 by construction. Subclasses narrow further in ``scope_queryset()`` and may
not override ``get_queryset()`` (checked when the class is defined).
"""

from __future__ import annotations

from typing import Any, ClassVar

from django.db.models import QuerySet
from rest_framework import viewsets
from rest_framework.request import Request

from tenancy.models import Role, TenantOwned
from tenancy.principals import Principal


def request_principal(request: Request) -> Principal:
    """The caller; views behind HasTenantRole always have one."""
    principal = request.auth
    if not isinstance(principal, Principal):
        raise TypeError("request has no tenant principal; is HasTenantRole applied?")
    return principal


class TenantScopedViewSet(viewsets.GenericViewSet):  # type: ignore[type-arg]
    read_role: ClassVar[Role] = Role.READ_ONLY
    write_role: ClassVar[Role] = Role.MEMBER

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "get_queryset" in vars(cls):
            raise TypeError(
                f"{cls.__name__} overrides get_queryset(); tenant scoping lives in "
                "TenantScopedViewSet.get_queryset(); narrow it in scope_queryset() instead"
            )

    @property
    def principal(self) -> Principal:
        return request_principal(self.request)

    def get_queryset(self) -> QuerySet[Any]:
        assert self.queryset is not None, f"{type(self).__name__} must set queryset"
        model = self.queryset.model
        if not issubclass(model, TenantOwned):
            raise TypeError(f"{model.__name__} is not TenantOwned")
        scoped = self.queryset.all().for_tenant(self.principal.tenant)  # type: ignore[attr-defined]
        return self.scope_queryset(scoped)

    def scope_queryset(self, queryset: QuerySet[Any]) -> QuerySet[Any]:
        """Narrow the tenant's rows further (filters, select_related); default: all."""
        return queryset
