"""Writes for tenants, memberships and API keys."""

from __future__ import annotations

import copy
import datetime as dt
import hashlib
import hmac
import re
import secrets
import string
import threading
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.core.cache import cache
from django.db import IntegrityError, transaction

from common.errors import AuthenticationFailed, Conflict, NotFound, ValidationFailed
from common.ids import new_id
from common.tenant_wall import system_scope
from common.time import now
from common.tokens import token_bump_now_and_after_commit, token_get
from tenancy.encryption import new_wrapped_data_key
from tenancy.models import ApiKey, Membership, Role, Tenant
from tenancy.principals import Principal
from tenancy.selectors import principal_for_user

if TYPE_CHECKING:
    from django.contrib.auth.models import User

KEY_SCHEME = "sap"
PREFIX_LENGTH = 12
_PREFIX_ALPHABET = string.ascii_lowercase + string.digits
_KEY_PATTERN = re.compile(r"^sap_([a-z0-9]{12})_([A-Za-z0-9_-]{40})$")
_SLUG_PATTERN = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$")
# last_used_at is refreshed at most this often, so requests do not all write.
LAST_USED_RESOLUTION = dt.timedelta(seconds=60)


def _hash_secret(secret: str) -> str:
    # API key secrets carry 240 bits of entropy: a fast hash is the right tool.
    return hashlib.sha256(secret.encode()).hexdigest()


def tenant_create(*, slug: str, name: str = "") -> Tenant:
    if not _SLUG_PATTERN.match(slug):
        raise ValidationFailed(
            "slug must be 1-63 lowercase letters, digits or inner hyphens", field="slug"
        )
    tenant_id = new_id()
    try:
        with transaction.atomic():
            return Tenant.objects.create(
                id=tenant_id,
                slug=slug,
                name=name or slug,
                data_key_wrapped=new_wrapped_data_key(tenant_id),
            )
    except IntegrityError as error:
        raise Conflict(f"a tenant with slug {slug!r} already exists", field="slug") from error


def membership_set(*, tenant: Tenant, user: User, role: Role) -> Membership:
    """Give ``user`` ``role`` in ``tenant`` (creating or updating the membership)."""
    membership, _ = Membership.objects.update_or_create(
        tenant=tenant, user=user, defaults={"role": role}
    )
    return membership


@dataclass(frozen=True)
class IssuedApiKey:
    """A new key and its full secret; the secret exists nowhere else after this."""

    api_key: ApiKey
    secret: str


def api_key_create(
    *,
    tenant: Tenant,
    name: str,
    role: Role,
    expires_at: dt.datetime | None = None,
    created_by: User | None = None,
) -> IssuedApiKey:
    api_key = ApiKey(
        tenant=tenant, name=name, role=role, expires_at=expires_at, created_by=created_by
    )
    secret = api_key_issue(api_key=api_key)
    api_key.save(force_insert=True)
    return IssuedApiKey(api_key=api_key, secret=secret)


def api_key_issue(*, api_key: ApiKey) -> str:
    """Validate an unsaved key and give it fresh key material; returns the full key.

    The caller saves the row. Only the SHA-256 of the secret is kept on it.
    """
    api_key.name = api_key.name.strip()
    if not api_key.name:
        raise ValidationFailed("name must not be blank", field="name")
    if api_key.expires_at is not None and api_key.expires_at <= now():
        raise ValidationFailed("expires_at must be in the future", field="expires_at")
    api_key.prefix = "".join(secrets.choice(_PREFIX_ALPHABET) for _ in range(PREFIX_LENGTH))
    secret = secrets.token_urlsafe(30)
    api_key.secret_hash = _hash_secret(secret)
    return f"{KEY_SCHEME}_{api_key.prefix}_{secret}"


def api_key_revoke(*, tenant: Tenant, api_key_id: uuid.UUID | str) -> ApiKey:
    """Revoke a key of ``tenant``; revoking twice is harmless."""
    try:
        api_key = ApiKey.objects.for_tenant(tenant).get(id=api_key_id)
    except (ApiKey.DoesNotExist, ValueError, TypeError) as error:
        raise NotFound("no such API key") from error
    if not api_key.revoked:
        api_key.revoked = True
        api_key.revoked_at = now()
        api_key.save(update_fields=["revoked", "revoked_at"])
    return api_key


@system_scope("authentication")  # the key's tenant is what this finds out
def api_key_authenticate(*, raw_key: str) -> ApiKey:
    """The active key matching ``raw_key``; its tenant is loaded alongside.

    Raises :class:`AuthenticationFailed` with code ``malformed_api_key``,
    ``invalid_api_key``, ``revoked_api_key``, ``expired_api_key`` or
    ``inactive_tenant``. An unknown prefix and a wrong secret are
    indistinguishable to the caller. A key is read from the database once per
    :func:`credentials_epoch` (see :func:`credentials_changed`): a request costs a cache
    read, not a query.
    """
    match = _KEY_PATTERN.match(raw_key)
    if match is None:
        raise AuthenticationFailed(
            "API key is malformed; expected sap_<12 characters>_<40 characters>",
            code="malformed_api_key",
        )
    prefix, secret = match.groups()
    api_key = _key_by_prefix(prefix)
    if api_key is None or not hmac.compare_digest(api_key.secret_hash, _hash_secret(secret)):
        raise AuthenticationFailed("API key is not valid", code="invalid_api_key")
    moment = now()
    if api_key.revoked:
        raise AuthenticationFailed("API key has been revoked", code="revoked_api_key")
    if api_key.is_expired(moment):
        raise AuthenticationFailed("API key has expired", code="expired_api_key")
    if not api_key.tenant.is_active:
        raise AuthenticationFailed("tenant is deactivated", code="inactive_tenant")
    if api_key.last_used_at is None or moment - api_key.last_used_at >= LAST_USED_RESOLUTION:
        ApiKey.objects.filter(id=api_key.id).update(last_used_at=moment)
        _remember_use(prefix, moment)
        api_key.last_used_at = moment
    return api_key


# Keys as last read, per process, by prefix, with the epoch they were read at (a key not
# found is remembered as None: guessing prefixes costs a cache read too).
MAX_CACHED_KEYS = 10_000
_keys: OrderedDict[str, tuple[str, ApiKey | None]] = OrderedDict()
_keys_lock = threading.Lock()
_EPOCH = "credentials"


def credentials_epoch() -> str | None:
    """The change token (:mod:`common.tokens`) that moves whenever an API key or a tenant
    changes; None while Redis is unreachable (keys are then read from the database)."""
    return token_get(_EPOCH)


def credentials_changed() -> None:
    """Move the credentials epoch now and again after commit (called by the model signals
    of :mod:`tenancy.credentials`): no process keeps a key it read before the change, nor
    one read between the change and its commit. While Redis is unreachable the change
    fails (its transaction rolls back), so no process can keep a key it changed."""
    with _keys_lock:
        _keys.clear()
    token_bump_now_and_after_commit(_EPOCH)


def _key_by_prefix(prefix: str) -> ApiKey | None:
    epoch = credentials_epoch()
    with _keys_lock:
        cached = _keys.get(prefix)
    if epoch is not None and cached is not None and cached[0] == epoch:
        return _copy(cached[1])
    api_key = ApiKey.objects.select_related("tenant").filter(prefix=prefix).first()
    if epoch is not None:
        with _keys_lock:
            _keys[prefix] = (epoch, _copy(api_key))
            _keys.move_to_end(prefix)
            while len(_keys) > MAX_CACHED_KEYS:
                _keys.popitem(last=False)
    return api_key


def _copy(api_key: ApiKey | None) -> ApiKey | None:
    """A copy of a cached key and its tenant, so no caller changes what others read."""
    if api_key is None:
        return None
    fresh = copy.copy(api_key)
    fresh.tenant = copy.copy(api_key.tenant)
    return fresh


def _remember_use(prefix: str, moment: dt.datetime) -> None:
    with _keys_lock:
        cached = _keys.get(prefix)
        if cached is not None and cached[1] is not None:
            cached[1].last_used_at = moment


# WebSocket tickets ----------------------------------------------------------------------------

WS_TICKET_TTL_S = 30
_TICKET_CACHE_PREFIX = "ws-ticket:"


@dataclass(frozen=True)
class WsTicket:
    ticket: str
    expires_in: int


def ws_ticket_issue(*, principal: Principal) -> WsTicket:
    """A one-time ticket standing for ``principal`` on one WebSocket connect (``?ticket=``),
    valid for ``WS_TICKET_TTL_S`` seconds. Stored in the cache, never in the database."""
    ticket = secrets.token_urlsafe(32)
    cache.set(
        _TICKET_CACHE_PREFIX + ticket,
        {
            "tenant_id": str(principal.tenant.id),
            "api_key_id": str(principal.api_key.id) if principal.api_key else None,
            "user_id": principal.user.pk if principal.user else None,
        },
        timeout=WS_TICKET_TTL_S,
    )
    return WsTicket(ticket=ticket, expires_in=WS_TICKET_TTL_S)


@system_scope("authentication")
def ws_ticket_redeem(*, ticket: str) -> Principal:
    """The principal a ticket stands for; the ticket is spent. The key or membership is
    checked again (a key revoked since the ticket was issued does not connect).

    Raises AuthenticationFailed (``invalid_ticket``) for an unknown, spent or expired ticket.
    """
    key = _TICKET_CACHE_PREFIX + ticket
    held = cache.get(key)
    if not isinstance(held, dict) or not cache.delete(key):
        raise AuthenticationFailed("WebSocket ticket is invalid or spent", code="invalid_ticket")
    tenant = Tenant.objects.filter(id=held["tenant_id"], is_active=True).first()
    if tenant is None:
        raise AuthenticationFailed("tenant is deactivated", code="inactive_tenant")
    if held["api_key_id"] is not None:
        api_key = ApiKey.objects.for_tenant(tenant).filter(id=held["api_key_id"]).first()
        if api_key is None or api_key.revoked or api_key.is_expired(now()):
            raise AuthenticationFailed("API key is no longer valid", code="invalid_api_key")
        return Principal(tenant=tenant, role=Role(api_key.role), api_key=api_key)
    from django.contrib.auth import get_user_model

    user = get_user_model().objects.filter(pk=held["user_id"], is_active=True).first()
    if user is None:
        raise AuthenticationFailed("user is no longer active", code="unauthenticated")
    return principal_for_user(user=user, tenant_slug=tenant.slug)
