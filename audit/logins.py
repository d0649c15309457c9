"""Logins into the console and the admin, succeeded or failed, in the audit trail of every
tenant the user belongs to (a name that is no user's is left to the login throttle's own
record of failed attempts: it belongs to no tenant)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model, user_logged_in, user_login_failed
from django.db import transaction
from django.http import HttpRequest

from common.audit import Actor, AuditAction, audit_record
from common.tenant_wall import system_scope, tenant_scope
from tenancy.auditing import user_actor
from tenancy.logins import login_client_address
from tenancy.models import Membership


def _client(request: HttpRequest | None) -> dict[str, Any]:
    if request is None:
        return {}
    return {"ip": login_client_address(request), "path": request.path}


def _record(user_id: Any, actor: Actor, action: AuditAction, details: dict[str, Any]) -> None:
    with system_scope("memberships"):  # a user's memberships span tenants
        memberships = list(Membership.objects.select_related("tenant").filter(user_id=user_id))
    with transaction.atomic():
        for membership in memberships:
            with tenant_scope(membership.tenant_id):  # each entry in its own tenant
                audit_record(
                    tenant=membership.tenant, actor=actor, action=action, target_type="user",
                    target_id=user_id, details=details,
                )  # fmt: skip


def logged_in(sender: Any, request: HttpRequest | None, user: Any, **kwargs: Any) -> None:
    _record(user.pk, user_actor(user), AuditAction.LOGIN_SUCCEEDED, _client(request))


def login_failed(
    sender: Any, credentials: dict[str, Any], request: HttpRequest | None = None, **kwargs: Any
) -> None:
    """The name tried (never the password: Django has already masked it)."""
    username = str(credentials.get("username") or "")
    user = get_user_model().objects.filter(username=username).only("pk").first()
    if user is None:
        return
    actor = Actor(kind="user", id=str(user.pk), name=username)
    _record(user.pk, actor, AuditAction.LOGIN_FAILED, _client(request))


def connect() -> None:
    user_logged_in.connect(logged_in, dispatch_uid="audit.login_succeeded")
    user_login_failed.connect(login_failed, dispatch_uid="audit.login_failed")
