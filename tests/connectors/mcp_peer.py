"""A real MCP server for the connector tests, built with the ``mcp`` SDK (``MCPServer``,
streamable HTTP, stateless, bearer tokens checked by the SDK's auth middleware), served by
uvicorn on loopback in a thread of the test process.

``/token`` issues that bearer by the OAuth 2.1 client-credentials grant to ``CLIENT_ID`` with
``CLIENT_SECRET`` (HTTP Basic), through the SDK's ``custom_route`` (its own authorization
server implements no client-credentials grant).

Its tools: ``forecast`` (text), ``add`` (structured content), ``wire_money`` (counts its runs,
for the approval tests), ``explode`` (an ``isError`` result), ``picture`` (an image) and
``essay`` (a text too large to inline). ``calls`` records every call the server ran."""

from __future__ import annotations

import base64
import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.utilities.types import Image
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from tests.connectors.serving import free_port, serving

TOKEN = "sentinel-mcp-bearer-5d1c0e77a9"
CLIENT_ID = "platform-client"
CLIENT_SECRET = "sentinel-oauth-secret-3e8f21c4"
PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c63f8cfc0f01f0005000201a5f1b1f40000000049454e44ae426082"
)
ESSAY_CHARS = 30_000


class StaticVerifier:
    """Accepts one bearer token."""

    def __init__(self, token: str) -> None:
        self.token = token

    async def verify_token(self, token: str) -> AccessToken | None:
        if token != self.token:
            return None
        return AccessToken(token=token, client_id="platform", scopes=[])


@dataclass
class Peer:
    url: str
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    token_requests: list[dict[str, Any]] = field(default_factory=list)

    @property
    def token_url(self) -> str:
        return self.url.removesuffix("/mcp") + "/token"

    def ran(self, name: str) -> int:
        return sum(1 for called, _ in self.calls if called == name)


def _server(peer: Peer, port: int) -> MCPServer[Any]:
    server: MCPServer[Any] = MCPServer(
        "weather",
        token_verifier=StaticVerifier(TOKEN),
        auth=AuthSettings(
            issuer_url=f"http://127.0.0.1:{port}",  # type: ignore[arg-type]
            resource_server_url=f"http://127.0.0.1:{port}/mcp",  # type: ignore[arg-type]
            validate_token_resource=False,
        ),
    )

    @server.custom_route("/token", methods=["POST"])
    async def token(request: Request) -> Response:
        form = await request.form()
        expected = "Basic " + base64.b64encode(f"{CLIENT_ID}:{CLIENT_SECRET}".encode()).decode()
        peer.token_requests.append(dict(form))
        if request.headers.get("authorization") != expected:
            return JSONResponse({"error": "invalid_client"}, status_code=401)
        if form.get("grant_type") != "client_credentials":
            return JSONResponse({"error": "unsupported_grant_type"}, status_code=400)
        return JSONResponse({"access_token": TOKEN, "token_type": "Bearer", "expires_in": 3600})

    @server.tool(description="The weather forecast for a city.")
    def forecast(city: str) -> str:
        peer.calls.append(("forecast", {"city": city}))
        return f"Sunny in {city}, 21 C"

    @server.tool(description="Add two integers.")
    def add(a: int, b: int) -> dict[str, int]:
        peer.calls.append(("add", {"a": a, "b": b}))
        return {"sum": a + b}

    @server.tool(description="Wire money to an account.")
    def wire_money(amount: int) -> str:
        peer.calls.append(("wire_money", {"amount": amount}))
        return f"wired {amount}"

    @server.tool(description="Always fails.")
    def explode() -> str:
        peer.calls.append(("explode", {}))
        raise ValueError("the detonator is wet")

    @server.tool(description="A one-pixel picture.")
    def picture() -> Image:
        peer.calls.append(("picture", {}))
        return Image(data=PNG, format="png")

    @server.tool(description="A very long text.")
    def essay() -> str:
        peer.calls.append(("essay", {}))
        return ("lorem ipsum " * (ESSAY_CHARS // 12 + 1))[:ESSAY_CHARS]

    return server


@contextlib.contextmanager
def mcp_peer() -> Iterator[Peer]:
    """The server, listening on loopback for the block."""
    port = free_port()
    peer = Peer(url=f"http://127.0.0.1:{port}/mcp")
    app = _server(peer, port).streamable_http_app(stateless_http=True, json_response=True)
    with serving(app, port, "MCP peer", lifespan="on"):
        yield peer
