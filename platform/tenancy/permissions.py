"""Role permissions for the API.

Views declare the role they need: ``read_role`` for safe methods (default
read-only) and ``write_role`` for the rest (default member). Another tenant's
objects never reach a permission check: scoping makes them 404 first.
"""

from __future__ import annotations

from typing import Any

from rest_framework.permissions import SAFE_METHODS, BasePermission
from rest_framework.request import Request

from tenancy.models import Role
from tenancy.principals import Principal


class HasTenantRole(BasePermission):
    def has_permission(self, request: Request, view: Any) -> bool:
        principal = request.auth
        if not isinstance(principal, Principal):
            return False
        if request.method in SAFE_METHODS:
            required = Role(getattr(view, "read_role", Role.READ_ONLY))
        else:
            required = Role(getattr(view, "write_role", Role.MEMBER))
        if principal.role.allows(required):
            return True
        verb = "read" if request.method in SAFE_METHODS else "write"
        needed = f"{required.value} or above is required"
        self.message = f"role {principal.role.value} may not {verb} here; {needed}"
        return False
