"""Authentication for DRF (API keys, sessions) and for Channels (the same, on a socket).

Both put a :class:`~tenancy.principals.Principal` where views and consumers look:
``request.auth`` for DRF, ``scope["principal"]`` for Channels.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any
from urllib.parse import parse_qs

from channels.auth import AuthMiddlewareStack
from channels.db import database_sync_to_async
from channels.security.websocket import OriginValidator
from django.conf import settings
from django.contrib.auth.models import AnonymousUser
from rest_framework import exceptions
from rest_framework.authentication import BaseAuthentication, SessionAuthentication
from rest_framework.request import Request

from common.errors import AuthenticationFailed, AuthThrottled
from common.tenant_wall import request_scope, tenant_enter, tenant_scope
from tenancy.models import Role
from tenancy.principals import Principal
from tenancy.selectors import principal_for_user
from tenancy.services import api_key_authenticate, ws_ticket_redeem
from tenancy.throttling import api_key_failure_record, api_key_throttle_check, client_address

BEARER_SUBPROTOCOL_PREFIX = "bearer."
TENANT_HEADER = "X-Tenant"


def principal_for_api_key(raw_key: str, *, remote_addr: str | None) -> Principal:
    """The principal of a key presented from ``remote_addr`` (the client's address).

    Raises :class:`AuthThrottled` while that address, or the key's prefix from it, has
    failed too often (:mod:`tenancy.throttling`; the key is not checked), else
    :class:`AuthenticationFailed` as :func:`api_key_authenticate` does, counting the failure.
    """
    address = client_address(remote_addr)
    api_key_throttle_check(address=address, raw_key=raw_key)
    try:
        api_key = api_key_authenticate(raw_key=raw_key)
    except AuthenticationFailed as error:
        api_key_failure_record(address=address, raw_key=raw_key, code=error.code)
        raise
    return Principal(tenant=api_key.tenant, role=Role(api_key.role), api_key=api_key)


def bearer_token(header: str) -> str:
    """The token of an ``Authorization: Bearer <token>`` header value."""
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise AuthenticationFailed(
            "Authorization header must read 'Bearer <API key>'", code="malformed_authorization"
        )
    return token.strip()


class ApiKeyAuthentication(BaseAuthentication):
    """``Authorization: Bearer sap_…``. No header: not this authenticator's business."""

    def authenticate(self, request: Request) -> tuple[AnonymousUser, Principal] | None:
        raw = request.META.get("HTTP_AUTHORIZATION")
        if not raw:
            return None
        try:
            token = bearer_token(raw)
            principal = principal_for_api_key(token, remote_addr=request.META.get("REMOTE_ADDR"))
            tenant_enter(principal.tenant.pk)  # for the rest of the request
            return AnonymousUser(), principal
        except AuthenticationFailed as error:
            # DRF recognises only its own exception as an authentication failure.
            raise exceptions.AuthenticationFailed(error.message, code=error.code) from error

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="api"'


class TenantSessionAuthentication(SessionAuthentication):
    """A logged-in user (admin, console) acting in one tenant, chosen by ``X-Tenant``."""

    def authenticate(self, request: Request) -> tuple[Any, Principal] | None:
        result = super().authenticate(request)
        if result is None:
            return None
        user = result[0]
        try:
            principal = principal_for_user(
                user=user, tenant_slug=request.headers.get(TENANT_HEADER)
            )
        except AuthenticationFailed as error:
            raise exceptions.AuthenticationFailed(error.message, code=error.code) from error
        tenant_enter(principal.tenant.pk)  # for the rest of the request
        return user, principal


# Channels scopes carry keys of our own ("principal"), so they are plain dicts here.
Scope = dict[str, Any]


def _header(scope: Scope, name: bytes) -> str | None:
    headers: Iterable[tuple[bytes, bytes]] = scope.get("headers", [])
    for key, value in headers:
        if key.lower() == name:
            return value.decode("latin-1")
    return None


@database_sync_to_async
def _scope_principal(scope: Scope) -> Principal | None:
    """The principal of a socket: API key by header or subprotocol, a one-time ``?ticket=``
    (``POST /api/v1/ws-tickets``), else the session user."""
    remote_addr = (scope.get("client") or [None])[0]
    authorization = _header(scope, b"authorization")
    if authorization is not None:
        return principal_for_api_key(bearer_token(authorization), remote_addr=remote_addr)
    for protocol in scope.get("subprotocols", []):
        if protocol.startswith(BEARER_SUBPROTOCOL_PREFIX):
            key = protocol[len(BEARER_SUBPROTOCOL_PREFIX) :]
            return principal_for_api_key(key, remote_addr=remote_addr)
    ticket = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("ticket")
    if ticket:
        return ws_ticket_redeem(ticket=ticket[0])
    user = scope.get("user")
    if user is not None and user.is_authenticated:
        return principal_for_user(user=user, tenant_slug=_header(scope, b"x-tenant"))
    return None


class PrincipalMiddleware:
    """Sets ``scope["principal"]`` (a Principal, or None) and ``scope["auth_error"]``.

    Consumers decide what to do with an unauthenticated socket (close 4401, or 4429 when
    ``auth_error`` is ``auth_throttled``).
    """

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> Any:
        scope = dict(scope)
        try:
            scope["principal"] = await _scope_principal(scope)
            scope["auth_error"] = None
        except (AuthenticationFailed, AuthThrottled) as error:
            scope["principal"] = None
            scope["auth_error"] = error.as_dict()
        principal: Principal | None = scope["principal"]
        # The socket acts for its principal's tenant, or for none (common.tenant_wall).
        with tenant_scope(principal.tenant.pk) if principal else request_scope():
            return await self.inner(scope, receive, send)


def TenantAuthMiddlewareStack(inner: Any) -> Any:  # noqa: N802 - mirrors Channels' naming
    """Sessions and users (Channels' stack), then API keys and tenant principals."""
    return AuthMiddlewareStack(PrincipalMiddleware(inner))


class _BrowserOriginValidator(OriginValidator):
    def valid_origin(self, parsed_origin: Any) -> bool:
        return parsed_origin is None or bool(super().valid_origin(parsed_origin))


def BrowserOriginValidator(inner: Any) -> Any:  # noqa: N802 - mirrors Channels' naming
    """Refuses a socket whose ``Origin`` is not one of ``ALLOWED_HOSTS`` (cross-site WebSocket
    hijacking), and lets one without ``Origin`` through: browsers always send it, so such a
    socket comes from a program, which authenticates with a key or a ticket like any other."""
    allowed: list[str] = list(settings.ALLOWED_HOSTS)
    if settings.DEBUG and not allowed:
        allowed = ["localhost", "127.0.0.1", "[::1]"]
    return _BrowserOriginValidator(inner, allowed)
