"""The engine's door to MCP tools (connectors.tools): what a reference resolves to, and what a
call of a real MCP server (the ``mcp`` SDK's, on loopback) becomes as a tool result — text,
structured content, images as attachments, a large text as a file, the tool's error and every
transport failure as failure results naming the server, never an exception.

Rows are committed (``transaction=True``): a listing is never fetched inside a transaction."""

from __future__ import annotations

import base64
from collections.abc import Iterator

import pytest
from pytest_django.fixtures import Settings

from connectors.models import McpServer
from connectors.results import LARGE_RESULT_CHARS, PREVIEW_CHARS
from connectors.servers import mcp_server_save
from connectors.tools import (
    RemoteTool,
    model_name,
    remote_call,
    remote_tools,
)
from tenancy.models import Tenant
from tests.connectors.mcp_peer import ESSAY_CHARS, PNG, TOKEN, Peer, mcp_peer

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(scope="module")
def peer() -> Iterator[Peer]:
    with mcp_peer() as running:
        yield running


@pytest.fixture
def server(tenant: Tenant, peer: Peer) -> McpServer:
    return mcp_server_save(
        tenant=tenant,
        data={"name": "weather", "url": peer.url, "auth": {"type": "bearer", "token": TOKEN}},
    )


def _tool(tenant: Tenant, name: str) -> RemoteTool:
    (tool,) = remote_tools(tenant=tenant, ref=f"mcp:weather/{name}").tools
    return tool


def test_a_server_reference_offers_every_tool_and_a_tool_reference_one(
    tenant: Tenant, server: McpServer
) -> None:
    every = remote_tools(tenant=tenant, ref="mcp:weather")
    one = remote_tools(tenant=tenant, ref="mcp:weather/add")
    missing = remote_tools(tenant=tenant, ref="mcp:weather/nope")
    unknown = remote_tools(tenant=tenant, ref="mcp:rain")

    assert [tool.name for tool in every.tools] == [
        "weather__forecast", "weather__add", "weather__wire_money", "weather__explode",
        "weather__picture", "weather__essay",
    ]  # fmt: skip
    assert one.tools == (
        RemoteTool(
            name="weather__add", description="Add two integers.",
            parameters=one.tools[0].parameters, source="mcp", server="weather",
            remote_name="add",
        ),
    )  # fmt: skip
    assert one.tools[0].parameters["required"] == ["a", "b"]
    assert missing.tools == ()
    assert "has no tool 'nope'" in (missing.problem or "")
    assert unknown.tools == ()
    assert unknown.problem == "no MCP server named 'rain'"


def test_model_names_are_valid_provider_tool_names() -> None:
    assert model_name("weather", "get.forecast/v2") == "weather__get_forecast_v2"
    assert model_name("weather", "x" * 80) == "weather__" + "x" * 55


def test_text_and_structured_results(tenant: Tenant, server: McpServer, peer: Peer) -> None:
    forecast = remote_call(
        tenant=tenant, tool=_tool(tenant, "forecast"), arguments={"city": "Oslo"}
    )
    added = remote_call(tenant=tenant, tool=_tool(tenant, "add"), arguments={"a": 2, "b": 3})

    assert (forecast.status, forecast.result) == ("success", "Sunny in Oslo, 21 C")
    assert (added.status, added.result) == ("success", '{\n  "sum": 5\n}')
    assert peer.calls[-2:] == [("forecast", {"city": "Oslo"}), ("add", {"a": 2, "b": 3})]
    server.refresh_from_db()
    assert server.last_ok_at is not None
    assert server.last_error == ""


def test_an_image_becomes_an_attachment(tenant: Tenant, server: McpServer) -> None:
    result = remote_call(tenant=tenant, tool=_tool(tenant, "picture"), arguments={})

    assert result.status == "success"
    assert result.result is None
    assert [dict(item) for item in result.attachments] == [
        {"name": "weather__picture-1.png", "mimeType": "image/png",
         "data": base64.b64encode(PNG).decode()},
    ]  # fmt: skip


def test_a_large_text_is_stored_as_a_file_and_previewed(tenant: Tenant, server: McpServer) -> None:
    result = remote_call(tenant=tenant, tool=_tool(tenant, "essay"), arguments={})

    assert ESSAY_CHARS > LARGE_RESULT_CHARS
    assert result.status == "success"
    assert result.result is not None
    assert result.result.startswith("lorem ipsum lorem")
    assert result.result.endswith(
        f"[... the result is {ESSAY_CHARS} characters; the first {PREVIEW_CHARS} are above, "
        "the whole of it is stored as the attachment weather__essay-result.txt]"
    )
    (attachment,) = result.attachments
    assert attachment["name"] == "weather__essay-result.txt"
    assert attachment["mimeType"] == "text/plain"
    assert len(base64.b64decode(attachment["data"])) == ESSAY_CHARS


def test_the_tools_error_is_a_failure_result(tenant: Tenant, server: McpServer) -> None:
    result = remote_call(tenant=tenant, tool=_tool(tenant, "explode"), arguments={})

    assert result.status == "error"
    assert result.error == "MCP server 'weather': Error executing tool explode"
    assert result.error_code == "mcp_tool_error"


def test_an_egress_refusal_is_a_failure_naming_the_server(
    tenant: Tenant, server: McpServer, peer: Peer, settings: Settings
) -> None:
    tool = _tool(tenant, "forecast")
    settings.EGRESS_ALLOWED_NETWORKS = []
    before = len(peer.calls)

    result = remote_call(tenant=tenant, tool=tool, arguments={"city": "Oslo"})

    assert result.status == "error"
    assert result.error_code == "egress_refused"
    assert (result.error or "").startswith(
        "MCP server 'weather' may not be reached: 127.0.0.1 is a loopback address"
    )
    assert len(peer.calls) == before
    server.refresh_from_db()
    assert server.last_error == result.error


def test_an_unreachable_server_is_a_failure_naming_the_server(
    tenant: Tenant, server: McpServer
) -> None:
    tool = _tool(tenant, "forecast")
    McpServer.objects.filter(pk=server.pk).update(url="http://127.0.0.1:9/mcp")

    result = remote_call(tenant=tenant, tool=tool, arguments={"city": "Oslo"})

    assert result.status == "error"
    assert result.error_code == "mcp_unavailable"
    assert (result.error or "").startswith("MCP server 'weather' could not be reached: ")
    assert TOKEN not in (result.error or "")


def test_a_deleted_server_is_a_failure(tenant: Tenant, server: McpServer) -> None:
    tool = _tool(tenant, "forecast")
    server.delete()

    result = remote_call(tenant=tenant, tool=tool, arguments={"city": "Oslo"})

    assert (result.status, result.error) == ("error", "MCP server 'weather' no longer exists")


def test_another_tenants_flows_resolve_nothing(
    other_tenant: Tenant, tenant: Tenant, server: McpServer
) -> None:
    foreign = remote_tools(tenant=other_tenant, ref="mcp:weather")
    tool = _tool(tenant, "forecast")

    result = remote_call(tenant=other_tenant, tool=tool, arguments={"city": "Oslo"})

    assert foreign.tools == ()
    assert result.error == "MCP server 'weather' no longer exists"
