"""Talking to an MCP server: ``tools/list`` and ``tools/call`` with the ``mcp`` SDK's client
over streamable HTTP, every connection through the egress guard.

The SDK's transport drives an ``httpx2.AsyncClient``; the egress guard builds a synchronous
``httpx2.Client`` (:func:`common.egress.egress_client`) that judges and pins every address it
connects to. :class:`EgressBridge` is the async client's transport: it hands each request to
the guarded client in a worker thread and streams the answer back, so no byte leaves except
through the guard, and a refusal is kept to be reported as such (the SDK would otherwise
fold it into a generic connection error).

Each operation opens its own connection and closes it: the 2026-07-28 protocol is stateless
(``server/discover``, no session), and an older server gets its ``initialize`` handshake from
the SDK. Callers are synchronous (a flow in a worker thread, a request in a web thread):
:func:`run` starts an event loop for the operation in that thread.
"""

from __future__ import annotations

import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

import anyio
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult, Tool

from common.egress import EgressRefused, egress_client, egress_refusal

T = TypeVar("T")
MAX_TOOL_PAGES: Final = 20
MAX_TOOLS: Final = 500
CONNECT_TIMEOUT_S: Final = 10.0
CLIENT_NAME: Final = "standard-agents-platform"


class McpUnavailable(Exception):
    """A server could not be asked (refused by the egress guard, unreachable, timed out, an
    answer that is no MCP, an authentication the server refused). ``message`` names the
    cause and never a secret."""

    def __init__(self, message: str, *, code: str = "mcp_unavailable") -> None:
        super().__init__(message)
        self.message = message
        self.code = code


@dataclass(frozen=True)
class Endpoint:
    """Where a server is and the headers that authenticate to it (secrets in clear: never
    log, store or show an Endpoint)."""

    url: str
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)


@dataclass(frozen=True)
class ListedTool:
    name: str
    description: str
    input_schema: dict[str, Any]


class _Threaded(httpx2.AsyncByteStream):
    """A guarded synchronous response's body, read chunk by chunk in worker threads."""

    def __init__(self, response: httpx2.Response) -> None:
        self._response = response
        self._chunks = response.iter_raw()

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while True:
            chunk = await anyio.to_thread.run_sync(next, self._chunks, None)
            if chunk is None:
                return
            yield chunk

    async def aclose(self) -> None:
        await anyio.to_thread.run_sync(self._response.close)


class EgressBridge(httpx2.AsyncBaseTransport):
    """An async transport whose every request goes through the egress guard's client;
    ``refused`` keeps the guard's refusal, if one happened."""

    def __init__(self, guarded: httpx2.Client) -> None:
        self._guarded = guarded
        self.refused: EgressRefused | None = None
        self.unauthorized: int | None = None  # a 401 or 403 the server answered

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        body = await request.aread()
        outgoing = httpx2.Request(
            request.method, request.url, headers=request.headers, content=body,
            extensions=request.extensions,
        )  # fmt: skip
        try:
            response = await anyio.to_thread.run_sync(self._send, outgoing)
        except Exception as error:
            self.refused = self.refused or egress_refusal(error)
            raise
        if response.status_code in (401, 403):
            self.unauthorized = response.status_code
        return httpx2.Response(
            response.status_code, headers=response.headers, stream=_Threaded(response),
            request=request,
        )  # fmt: skip

    def _send(self, request: httpx2.Request) -> httpx2.Response:
        return self._guarded.send(request, stream=True)

    async def aclose(self) -> None:
        await anyio.to_thread.run_sync(self._guarded.close)


def run(endpoint: Endpoint, operation: Callable[[Client], Awaitable[T]], *, timeout: float) -> T:
    """Connect to ``endpoint``, run ``operation`` with the SDK's client, close. Raises
    :class:`McpUnavailable` for whatever kept it from an answer within ``timeout`` seconds
    (a tool's own error is an answer: a result with ``is_error``)."""
    bridge = EgressBridge(egress_client(timeout=httpx2.Timeout(timeout, connect=CONNECT_TIMEOUT_S)))

    async def session() -> T:
        http = httpx2.AsyncClient(
            transport=bridge, headers=dict(endpoint.headers),
            timeout=httpx2.Timeout(timeout, connect=CONNECT_TIMEOUT_S),
        )  # fmt: skip
        async with http:
            transport = streamable_http_client(endpoint.url, http_client=http)
            with anyio.fail_after(timeout):
                async with Client(transport, read_timeout_seconds=timeout, cache=None) as client:
                    return await operation(client)

    started = time.monotonic()
    try:
        return anyio.run(session)
    except McpUnavailable:
        raise
    except Exception as error:  # whatever the SDK or the network raised: reported, not raised
        refused = bridge.refused or _refusal_in(error)
        if refused is not None:
            raise McpUnavailable(refused.message, code="egress_refused") from None
        if bridge.unauthorized is not None:
            raise McpUnavailable(
                f"the server refused the credentials (HTTP {bridge.unauthorized})",
                code="mcp_unauthorized",
            ) from None
        if isinstance(error, TimeoutError) or time.monotonic() - started >= timeout:
            raise McpUnavailable(f"no answer within {timeout:g} s", code="mcp_timeout") from None
        raise McpUnavailable(_describe(error)) from None


def _refusal_in(error: BaseException) -> EgressRefused | None:
    """The egress refusal behind ``error``, looking into exception groups too."""
    found = egress_refusal(error)
    if found is not None:
        return found
    if isinstance(error, BaseExceptionGroup):
        for inner in error.exceptions:
            found = _refusal_in(inner)
            if found is not None:
                return found
    return None


def _describe(error: BaseException) -> str:
    """What went wrong, from the innermost error of a group (the SDK's task groups wrap)."""
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    if isinstance(error, httpx2.HTTPStatusError):
        status = error.response.status_code
        if status in (401, 403):
            return f"the server refused the credentials (HTTP {status})"
        return f"the server answered HTTP {status}"
    text = str(error).strip() or type(error).__name__
    return f"{type(error).__name__}: {text}"[:500]


# Operations ----------------------------------------------------------------------------------


def tools_list(endpoint: Endpoint, *, timeout: float) -> list[ListedTool]:
    """Every tool the server lists (following pages, at most ``MAX_TOOLS``)."""

    async def listing(client: Client) -> list[ListedTool]:
        tools: list[Tool] = []
        cursor: str | None = None
        for _ in range(MAX_TOOL_PAGES):
            page = await client.list_tools(cursor=cursor)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if cursor is None or len(tools) >= MAX_TOOLS:
                break
        return [
            ListedTool(tool.name, tool.description or "", dict(tool.input_schema))
            for tool in tools[:MAX_TOOLS]
        ]

    return run(endpoint, listing, timeout=timeout)


def tool_call(
    endpoint: Endpoint, name: str, arguments: Mapping[str, Any], *, timeout: float
) -> CallToolResult:
    """The server's result of calling its tool ``name``."""

    async def call(client: Client) -> CallToolResult:
        return await client.call_tool(name, dict(arguments), read_timeout_seconds=timeout)

    return run(endpoint, call, timeout=timeout)


# OAuth 2.1 client credentials ------------------------------------------------------------------

TOKEN_MARGIN_S: Final = 30.0
_tokens: dict[tuple[str, str], tuple[str, float]] = {}
_tokens_lock = threading.Lock()


def oauth_token(
    *, cache_key: str, token_url: str, client_id: str, client_secret: str, scopes: str,
    timeout: float,
) -> str:  # fmt: skip
    """An access token from ``token_url`` by the client-credentials grant (RFC 6749 §4.4,
    client authentication by HTTP Basic), through the egress guard; kept in this process
    until shortly before it expires. ``cache_key`` changes whenever the credentials do."""
    key = (cache_key, scopes)
    with _tokens_lock:
        cached = _tokens.get(key)
    if cached is not None and cached[1] > time.monotonic():
        return cached[0]
    form = {"grant_type": "client_credentials", **({"scope": scopes} if scopes else {})}
    try:
        with egress_client(timeout=timeout) as http:
            response = http.post(token_url, data=form, auth=(client_id, client_secret))
    except httpx2.HTTPError as error:
        refused = egress_refusal(error)
        if refused is not None:
            raise McpUnavailable(f"token URL: {refused.message}", code="egress_refused") from None
        raise McpUnavailable(f"the token URL could not be reached: {_describe(error)}") from None
    if response.status_code != 200:
        raise McpUnavailable(f"the token URL refused the client credentials (HTTP "
                             f"{response.status_code})")  # fmt: skip
    try:
        body = response.json()
        token = body["access_token"]
        expires_in = float(body.get("expires_in") or 3600)
    except (ValueError, KeyError, TypeError):
        raise McpUnavailable("the token URL's answer holds no access_token") from None
    if not isinstance(token, str) or not token:
        raise McpUnavailable("the token URL's answer holds no access_token")
    with _tokens_lock:
        if len(_tokens) > 1000:
            _tokens.clear()
        _tokens[key] = (token, time.monotonic() + max(expires_in - TOKEN_MARGIN_S, 0.0))
    return token


def oauth_forget(cache_key: str) -> None:
    """Drop the tokens kept for ``cache_key`` (after the server refused one)."""
    with _tokens_lock:
        for key in [key for key in _tokens if key[0] == cache_key]:
            del _tokens[key]
