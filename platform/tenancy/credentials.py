"""Open sockets follow their credentials: revoking or expiring an API key, removing a
membership, deactivating a user or a tenant closes the sockets opened with them. Any
change to a key or a tenant also moves the credentials epoch, which drops every process's
cached keys (:func:`tenancy.services.credentials_changed`).

Each socket joins the channel groups of its principal (:func:`credential_groups`); model
signals send ``credentials.revoked`` to a group once the change commits, whether a service,
the admin or a script made it. The consumer closes with 4401; a key's expiry is timed by
the consumer itself.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models.signals import post_delete, post_save

from common.time import now
from tenancy.models import ApiKey, Membership, Tenant
from tenancy.services import credentials_changed

if TYPE_CHECKING:
    from tenancy.principals import Principal

REVOKED = "credentials.revoked"  # the message type; consumers handle credentials_revoked


def _tenant_group(tenant_id: Any) -> str:
    return f"auth.tenant.{tenant_id}"


def _key_group(key_id: Any) -> str:
    return f"auth.key.{key_id}"


def _member_group(user_id: Any, tenant_id: Any) -> str:
    return f"auth.user.{user_id}.{tenant_id}"


def credential_groups(principal: Principal) -> list[str]:
    """The groups a socket of ``principal`` joins to hear that its credentials went away."""
    groups = [_tenant_group(principal.tenant.id)]
    if principal.api_key is not None:
        groups.append(_key_group(principal.api_key.id))
    if principal.user is not None:
        groups.append(_member_group(principal.user.pk, principal.tenant.id))
    return groups


def credentials_expire_at(principal: Principal) -> dt.datetime | None:
    """When the principal's credentials expire by themselves (its key's expiry), if ever."""
    return principal.api_key.expires_at if principal.api_key is not None else None


def _revoke(group: str) -> None:
    """After the current transaction commits, close every socket in ``group``."""

    def send() -> None:
        layer = get_channel_layer()
        if layer is not None:
            async_to_sync(layer.group_send)(group, {"type": REVOKED})

    transaction.on_commit(send, robust=True)


def _api_key_saved(sender: type[ApiKey], instance: ApiKey, **kwargs: Any) -> None:
    credentials_changed()
    if instance.revoked or (instance.expires_at is not None and instance.expires_at <= now()):
        _revoke(_key_group(instance.id))


def _api_key_deleted(sender: type[ApiKey], instance: ApiKey, **kwargs: Any) -> None:
    credentials_changed()
    _revoke(_key_group(instance.id))


def _membership_deleted(sender: type[Membership], instance: Membership, **kwargs: Any) -> None:
    _revoke(_member_group(instance.user_id, instance.tenant_id))


def _tenant_saved(sender: type[Tenant], instance: Tenant, **kwargs: Any) -> None:
    credentials_changed()
    if not instance.is_active:
        _revoke(_tenant_group(instance.id))


def _user_saved(sender: Any, instance: Any, **kwargs: Any) -> None:
    if not instance.is_active:
        for tenant_id in Membership.objects.filter(user=instance).values_list(
            "tenant_id", flat=True
        ):
            _revoke(_member_group(instance.pk, tenant_id))


def connect_signals() -> None:
    post_save.connect(_api_key_saved, sender=ApiKey, dispatch_uid="credentials.api_key")
    post_delete.connect(_api_key_deleted, sender=ApiKey, dispatch_uid="credentials.api_key_del")
    post_delete.connect(_membership_deleted, sender=Membership, dispatch_uid="credentials.member")
    post_save.connect(_tenant_saved, sender=Tenant, dispatch_uid="credentials.tenant")
    post_save.connect(_user_saved, sender=get_user_model(), dispatch_uid="credentials.user")
