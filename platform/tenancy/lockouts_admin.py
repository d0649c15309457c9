"""The admin's page of failed logins (django-axes' access attempts), for superusers only.

Attempts name the people of every tenant and the addresses they log in from, so no tenant's
staff may see them, whatever Django permissions they hold. Deleting rows unlocks what they
locked (:mod:`tenancy.logins`): a (username, address), or an address.
"""

from __future__ import annotations

from typing import Any

from axes.admin import AccessAttemptAdmin
from axes.models import AccessAttempt
from django.contrib import admin
from django.http import HttpRequest


def _superuser(request: HttpRequest) -> bool:
    user = request.user
    return bool(user.is_active and user.is_staff and user.is_superuser)


@admin.register(AccessAttempt)
class LoginAttemptAdmin(AccessAttemptAdmin):
    def has_module_permission(self, request: HttpRequest) -> bool:
        return _superuser(request)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return _superuser(request)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return _superuser(request)
