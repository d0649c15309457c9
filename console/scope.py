"""Who acts in the console: the logged-in user's membership in the tenant chosen in the
session, and the role it gives, exactly as the API's session authentication sees it.

Views are wrapped in :func:`console_view`; it resolves the membership once and refuses
writes by a role below ``member`` with 403 (the API's ``write_role``), so a read-only member
who forges a POST gets the same refusal the API gives.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import wraps
from typing import Concatenate, ParamSpec

from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest
from django.http.response import HttpResponseBase
from django.shortcuts import redirect, render

from common.tenant_wall import tenant_enter
from tenancy.models import Membership, Role
from tenancy.principals import Principal
from tenancy.selectors import membership_list

SESSION_TENANT = "console_tenant"
WRITE_ROLE = Role.MEMBER

P = ParamSpec("P")


@dataclass(frozen=True)
class Console:
    """The membership a console request acts through, and the others the user could pick."""

    principal: Principal
    memberships: list[Membership]

    @property
    def can_write(self) -> bool:
        return self.principal.role.allows(WRITE_ROLE)

    @property
    def can_admin(self) -> bool:
        return self.principal.role.allows(Role.ADMIN)


def console_of(request: HttpRequest) -> Console:
    console = getattr(request, "console", None)
    assert isinstance(console, Console), "only views wrapped in console_view have a console"
    return console


def _chosen(memberships: list[Membership], slug: object) -> Membership | None:
    if len(memberships) == 1:
        return memberships[0]
    return next((row for row in memberships if row.tenant.slug == slug), None)


def console_view(
    *, write: bool | None = None
) -> Callable[
    [Callable[Concatenate[HttpRequest, P], HttpResponseBase]],
    Callable[Concatenate[HttpRequest, P], HttpResponseBase],
]:
    """A console page: the user must be logged in (else the login page) and a member of an
    active tenant (else a page saying so, 403); with several memberships and none chosen,
    the tenant switcher. A write (by default, any method but GET and HEAD) needs ``member``
    or above: 403. A view's Http404 (another tenant's thread) is the console's 404 page."""

    def wrap(
        view: Callable[Concatenate[HttpRequest, P], HttpResponseBase],
    ) -> Callable[Concatenate[HttpRequest, P], HttpResponseBase]:
        @wraps(view)
        def scoped(request: HttpRequest, *args: P.args, **kwargs: P.kwargs) -> HttpResponseBase:
            user = request.user
            assert isinstance(user, User)
            memberships = membership_list(user=user)
            if not memberships:
                return render(request, "console/no_tenant.html", status=403)
            chosen = _chosen(memberships, request.session.get(SESSION_TENANT))
            if chosen is None:
                return redirect("console:tenant-choose")
            principal = Principal(tenant=chosen.tenant, role=Role(chosen.role), user=user)
            console = Console(principal=principal, memberships=memberships)
            writes = write if write is not None else request.method not in ("GET", "HEAD")
            if writes and not console.can_write:
                raise PermissionDenied(
                    f"role {principal.role.value} may not write here; "
                    f"{WRITE_ROLE.value} or above is required"
                )
            request.console = console  # type: ignore[attr-defined]
            tenant_enter(principal.tenant.pk)  # for the rest of the request
            try:
                return view(request, *args, **kwargs)
            except Http404:  # the console's own page (the site's 404 handler answers JSON)
                return render(request, "console/not_found.html", {"console": console}, status=404)

        return login_required(scoped)  # type: ignore[return-value]

    return wrap
