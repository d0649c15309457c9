"""Talking to an MCP server: ``tools/list`` and ``tools/call`` with the ``mcp`` SDK's client
over streamable HTTP, every connection through the egress guard
(:func:`connectors.transport.egress_transport`).

Each operation opens its own connection and closes it: the 2026-07-28 protocol is stateless
(``server/discover``, no session), and an older server gets its ``initialize`` handshake from
the SDK. Callers are synchronous (a flow in a worker thread, a request in a web thread):
:func:`run` starts an event loop for the operation in that thread.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeVar

import anyio
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult, Tool

from connectors.transport import (
    CONNECT_TIMEOUT_S,
    Endpoint,
    RemoteUnavailable,
    egress_transport,
    failure,
)

T = TypeVar("T")
MAX_TOOL_PAGES: Final = 20
MAX_TOOLS: Final = 500


@dataclass(frozen=True)
class ListedTool:
    name: str
    description: str
    input_schema: dict[str, Any]


def run(endpoint: Endpoint, operation: Callable[[Client], Awaitable[T]], *, timeout: float) -> T:
    """Connect to ``endpoint``, run ``operation`` with the SDK's client, close. Raises
    :class:`RemoteUnavailable` for whatever kept it from an answer within ``timeout`` seconds
    (a tool's own error is an answer: a result with ``is_error``)."""
    transport, seen = egress_transport(httpx2, timeout=timeout)

    async def session() -> T:
        http = httpx2.AsyncClient(
            transport=transport, headers=dict(endpoint.headers),
            timeout=httpx2.Timeout(timeout, connect=CONNECT_TIMEOUT_S),
        )  # fmt: skip
        async with http:
            stream = streamable_http_client(endpoint.url, http_client=http)
            with anyio.fail_after(timeout):
                async with Client(stream, read_timeout_seconds=timeout, cache=None) as client:
                    return await operation(client)

    started = time.monotonic()
    try:
        return anyio.run(session)
    except RemoteUnavailable:
        raise
    except Exception as error:  # whatever the SDK or the network raised: reported, not raised
        raise failure(error, seen, protocol="mcp", timeout=timeout, started=started) from None


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
