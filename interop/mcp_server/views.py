"""``/mcp/``: the MCP endpoint (streamable HTTP), an async Django view.

It authenticates the ``Authorization: Bearer`` API key as the REST API does (a missing,
wrong, revoked or expired key is a 401 in the API's error shape, with
``WWW-Authenticate: Bearer``; a throttled address a 429), counts the request against the
tenant's and the key's request quotas, enters the key's tenant, and hands the request to
the MCP SDK's streamable-HTTP transport (:class:`StreamableHTTPSessionManager`, stateless:
a 2026-07-28 request is one self-contained POST; an older client's ``initialize``
handshake is answered too, each of its POSTs served on its own). The SDK answers JSON,
or Server-Sent Events once the call sends a notification (progress) or runs long.
"""

from __future__ import annotations

import logging
from typing import Any

from django.http import HttpRequest, HttpResponseBase, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from common.api import domain_error_response, error_body
from common.connections import connection_returned
from common.errors import AuthenticationFailed, DomainError
from common.tenant_wall import tenant_enter, tenant_scope
from interop.mcp_server.bridge import asgi_response
from tenancy.authentication import bearer_token, principal_for_api_key
from tenancy.principals import Principal
from usage.quotas import request_admit

WWW_AUTHENTICATE = 'Bearer realm="mcp"'

# Each request has a transport manager of its own, whose start and stop the SDK logs at INFO
# (and a stateless transport's end): lines that say nothing about the request.
for _chatty in ("mcp.server.streamable_http_manager", "mcp.server.streamable_http"):
    logging.getLogger(_chatty).setLevel(logging.WARNING)


def _authenticated(authorization: str | None, remote_addr: str | None) -> Principal:
    """The caller's principal, its request counted against its quotas. Raises
    AuthenticationFailed (401), AuthThrottled or QuotaExceeded (429)."""
    if not authorization:
        raise AuthenticationFailed(
            "Authentication credentials were not provided: send 'Authorization: Bearer <API key>'"
        )
    principal = principal_for_api_key(bearer_token(authorization), remote_addr=remote_addr)
    with tenant_scope(principal.tenant.pk):
        key = principal.api_key
        request_admit(tenant_id=principal.tenant.pk, key_id=None if key is None else str(key.pk))
    return principal


async def _served(request: HttpRequest) -> HttpResponseBase:
    """One request to the SDK's transport, by a manager of its own (stateless: nothing
    outlives the request). The SDK loads at the first request: a web process serving no MCP
    client never pays its second of start."""
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

    from interop.mcp_server.server import mcp_server

    manager = StreamableHTTPSessionManager(app=mcp_server(), stateless=True)

    async def app(scope: Any, receive: Any, send: Any) -> None:
        async with manager.run():
            await manager.handle_request(scope, receive, send)

    return await asgi_response(app, request)


@csrf_exempt  # a bearer key, never a cookie, authenticates it
async def mcp_endpoint(request: HttpRequest) -> HttpResponseBase:
    """The MCP endpoint: POST a JSON-RPC request (``tools/list``, ``tools/call``, …);
    another method is a 405."""
    try:
        principal = await connection_returned(_authenticated)(
            request.headers.get("Authorization"), request.META.get("REMOTE_ADDR")
        )
    except DomainError as error:
        response = domain_error_response(error)
        if error.status == 401:
            response["WWW-Authenticate"] = WWW_AUTHENTICATE
        return response
    tenant_enter(principal.tenant.pk)  # for the rest of the request, its body included
    if request.method != "POST":
        refused = JsonResponse(
            error_body("method_not_allowed", f"method {request.method} is not allowed here: "
                       "POST a JSON-RPC request"),
            status=405,
        )  # fmt: skip
        refused["Allow"] = "POST"
        return refused
    from interop.mcp_server.server import caller

    caller.set(principal)
    return await _served(request)
