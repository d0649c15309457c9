"""Who an audit entry names: the API key or the user behind a principal, and the one call
the API views record through (:func:`common.audit.audit_record` with the caller as actor)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from common.audit import Actor, audit_record
from tenancy.principals import Principal

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser


def user_actor(user: AbstractBaseUser) -> Actor:
    return Actor(kind="user", id=str(user.pk), name=user.get_username())


def principal_actor(principal: Principal) -> Actor:
    """The API key (id and name) or the user (id and username) a call came with."""
    if principal.api_key is not None:
        return Actor(kind="api_key", id=str(principal.api_key.pk), name=principal.api_key.name)
    assert principal.user is not None, "a principal has an API key or a user"
    return user_actor(principal.user)


def audit_by(
    principal: Principal, action: str, target_type: str, target_id: object,
    details: Mapping[str, Any] | None = None,
) -> None:  # fmt: skip
    """Record that the caller did ``action``; call it inside the change's transaction."""
    audit_record(
        tenant=principal.tenant, actor=principal_actor(principal), action=action,
        target_type=target_type, target_id=target_id, details=details,
    )  # fmt: skip
